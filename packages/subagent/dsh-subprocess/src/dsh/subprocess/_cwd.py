"""Where a child process runs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dsh.subagent import InvalidRequest

if TYPE_CHECKING:
    from dsh.core import Agent

__all__ = ["check_directory", "resolve_child_cwd"]


def check_directory(path: str, what: str) -> str:
    """``path`` if it is an absolute, existing, enterable directory; else a clear error."""
    if not os.path.isabs(path):
        raise InvalidRequest(f"{what} must be an absolute path, got {path!r}")
    if not os.path.isdir(path):
        raise InvalidRequest(f"{what} {path!r} is not a directory")
    if not os.access(path, os.X_OK):
        raise InvalidRequest(f"{what} {path!r} cannot be entered (no permission)")
    return path


def resolve_child_cwd(configured: str | None, parent: Agent, *, provider: str) -> str:
    """The configured cwd if set, else the parent session's cwd; checked either way."""
    if configured is not None:
        return check_directory(configured, f"{provider} provider cwd")
    inherited = parent.cwd
    if inherited is None:
        raise InvalidRequest(
            f"{provider} provider: no cwd configured and the parent session records none;"
            " set cwd in the provider config"
        )
    return check_directory(inherited, "parent session cwd")
