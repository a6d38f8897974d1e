"""Errors of dsh.subprocess."""

from __future__ import annotations

from dsh.core import DshError

__all__ = ["ProcessStartError"]


class ProcessStartError(DshError):
    """A child process could not be started (missing or non-executable command, bad
    cwd...); the message names the command and the reason."""
