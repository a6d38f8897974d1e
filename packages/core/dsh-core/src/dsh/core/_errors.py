"""The root of dsh's error tree."""

from __future__ import annotations

__all__ = ["ConfigError", "DshError"]


class DshError(Exception):
    """Base of every error dsh raises on purpose (configuration, sessions, tools,
    subagents, ...): ``except DshError`` catches what dsh means to raise and lets
    programming errors through."""


class ConfigError(DshError):
    """The configuration is missing something an operation needs, or names something
    that is not installed (no model, an unknown model adapter, ...); the message says
    what to fix."""
