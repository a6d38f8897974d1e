"""The configuration every subprocess provider shares, with the same field names."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import Field, field_validator

from dsh.core.permissions import SandboxConfig, SandboxPolicy
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
    sandbox: SandboxConfig | None = None
    """Narrows the sandbox the child process runs in, which is the delegating agent's
    (``{ mode = "read-only" }``, ``{ network = false }``, ``{ writable_roots = [...] }``);
    it can never widen it: asking for more than the preset's ``[sandbox]`` fails the
    load. The child keeps the network whatever this says (it must reach its model):
    the network setting is passed on to what the child's own tools do."""
    state_dirs: list[str] = []
    """Absolute directories the child process writes for its own state (besides those
    the provider knows for its product, such as ``CODEX_HOME``), writable inside its
    sandbox; created if missing. Its tools can write them too unless the product
    applies the sandbox to its tools itself (a dsh child, codex)."""

    @field_validator("state_dirs")
    @classmethod
    def _absolute_dirs(cls, value: list[str]) -> list[str]:
        dirs = [os.path.expanduser(d) for d in value]
        for original, directory in zip(value, dirs, strict=True):
            if not os.path.isabs(directory):
                raise ValueError(f"state_dirs must be absolute paths, got {original!r}")
        return dirs

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is None:
            return None
        expanded = os.path.expanduser(value)
        if not os.path.isabs(expanded):
            raise ValueError(f"cwd must be an absolute path, got {value!r}")
        return expanded

    def sandbox_policy(
        self, ceiling: SandboxPolicy, *, strict: bool = False, what: str = "this provider row"
    ) -> SandboxPolicy:
        """``ceiling`` (the delegating agent's policy, or the context's) narrowed by
        :attr:`sandbox`. ``strict`` (at load, against the context's): a row that asks
        for more raises :class:`~dsh.core.permissions.SandboxError` naming ``what``."""
        return ceiling.narrowed(self.sandbox, strict=strict, what=what)

    def writable_state(self, env: Mapping[str, str]) -> list[str]:
        """The directories a child with environment ``env`` writes for its own state:
        :attr:`state_dirs`; a provider adds its product's own (override and extend)."""
        return list(self.state_dirs)

    @property
    def argv(self) -> list[str]:
        """``[command, *args]`` (``ValueError`` without a ``command``)."""
        if self.command is None:
            raise ValueError("no command is configured")
        return [self.command, *self.args]
