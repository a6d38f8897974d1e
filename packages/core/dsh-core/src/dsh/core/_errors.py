"""The root of dsh's error tree."""

from __future__ import annotations

__all__ = ["DshError"]


class DshError(Exception):
    """Base of every error dsh raises on purpose (configuration, sessions, tools,
    subagents, ...): ``except DshError`` catches what dsh means to raise and lets
    programming errors through."""
