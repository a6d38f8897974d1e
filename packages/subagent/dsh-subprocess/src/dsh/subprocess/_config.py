"""The configuration every subprocess provider shares, with the same field names."""

from __future__ import annotations

import os

from pydantic import Field, field_validator

from dsh.subagent.kit import RemoteTimeouts
from dsh.subprocess._env import EnvNames, EnvVariables

__all__ = ["SubprocessConfig"]


class SubprocessConfig(RemoteTimeouts):
    """Config fields of a provider whose child is a local process (acp, codex,
    claude-code): subclass it and add the transport's own fields.

    ``start_timeout``, ``turn_timeout`` and ``cancel_grace`` come from
    :class:`~dsh.subagent.kit.RemoteTimeouts`.
    """

    command: str | None = Field(None, min_length=1)
    """The executable (looked up on the child's ``PATH``). A provider either requires
    it (its config declares it again without a default) or knows a default (the
    product's bundled executable) and builds its own command line."""
    args: list[str] = []
    """Arguments after ``command``."""
    cwd: str | None = None
    """Absolute directory the child runs in. Unset: the parent session's cwd."""
    env: EnvVariables = {}
    """Variables set on top of the credential-scrubbed environment. Secrets belong in
    ``passthrough_env``, not here: a preset is not a place for keys."""
    passthrough_env: EnvNames = []
    """Names of variables the child inherits from this process as they are
    (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``...)."""
    eof_grace: float = Field(2.0, ge=0)
    """Teardown: seconds the child gets to exit after its stdin closes, before SIGTERM."""
    term_grace: float = Field(2.0, ge=0)
    """Teardown: seconds the child's process group gets after SIGTERM, before SIGKILL."""

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is None:
            return None
        expanded = os.path.expanduser(value)
        if not os.path.isabs(expanded):
            raise ValueError(f"cwd must be an absolute path, got {value!r}")
        return expanded

    @property
    def argv(self) -> list[str]:
        """``[command, *args]`` (``ValueError`` without a ``command``)."""
        if self.command is None:
            raise ValueError("no command is configured")
        return [self.command, *self.args]
