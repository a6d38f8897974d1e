"""``SubagentError`` and its codes."""

from __future__ import annotations

from typing import Literal

__all__ = ["SubagentError", "SubagentErrorCode"]

SubagentErrorCode = Literal[
    "DUPLICATE_PROVIDER",
    "NO_PROVIDER",
    "UNSUPPORTED_CAPABILITY",
    "INVALID_REQUEST",
    "DEPTH_EXCEEDED",
    "ABORTED",
    "START_FAILED",
    "CONTINUATION_UNAVAILABLE",
    "DUPLICATE_CHILD",
    "NOT_RESUMABLE",
    "UNAUTHORIZED",
    "DRAINING",
]


class SubagentError(Exception):
    """A subagent request was refused or could not start. ``code`` says which way."""

    def __init__(self, message: str, code: SubagentErrorCode) -> None:
        super().__init__(message)
        self.message = message
        self.code: SubagentErrorCode = code

    def __repr__(self) -> str:
        return f"SubagentError({self.message!r}, code={self.code!r})"
