"""The ``dsh-tool-shell`` plugin's config."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dsh.core.permissions import SandboxConfig
from dsh.subprocess import EnvNames, EnvVariables

__all__ = ["ShellConfig"]


class ShellConfig(BaseModel):
    """Config of ``dsh-tool-shell``.

    ::

        [[plugin]]
        name = "dsh-tool-shell"
        config = { timeout = 60, max_timeout = 300, passthrough_env = ["GITHUB_TOKEN"] }
    """

    model_config = ConfigDict(extra="forbid")

    tool_name: str = Field("shell", pattern=r"^[A-Za-z0-9_-]+$", max_length=64)
    """The tool's name (several rows need different names)."""
    shell: str = "/bin/sh"
    """The shell that runs the command as ``<shell> -c <command>``."""
    cwd: str | None = None
    """Where commands start (absolute). Default: the calling agent's working directory
    (its session's ``cwd``), else the context's."""
    timeout: float = Field(120.0, gt=0)
    """Seconds a command may run when the model gives no ``timeout``."""
    max_timeout: float = Field(600.0, gt=0)
    """The most the model may ask for: a larger ``timeout`` argument is lowered to it."""
    max_output_bytes: int = Field(64 * 1024, ge=256, le=64 * 1024 * 1024)
    """Output (stdout and stderr together) kept per command: its beginning and its end,
    with a ``[truncated: ...]`` marker in between when there was more."""
    env: EnvVariables = {}
    """Variables set for the command (on top of the scrubbed environment)."""
    passthrough_env: EnvNames = []
    """Names of variables of dsh's own environment the command inherits as they are
    (everything not in the safe list, such as API keys, is dropped otherwise)."""
    term_grace: float = Field(1.0, ge=0, le=30)
    """Seconds between SIGTERM and SIGKILL when a command is stopped (timeout, cancel)."""
    sandbox: SandboxConfig | None = None
    """Narrows the agent's sandbox for this tool (``{ mode = "read-only" }``,
    ``{ network = false }``); it can never widen it: asking for more than the preset's
    ``[sandbox]`` fails the load."""
    allow_write: list[str] = []
    """Protected paths (``.git``, ``.dsh``, preset files) this tool's commands may write
    anyway, as absolute paths or relative to the working directory."""

    @field_validator("cwd")
    @classmethod
    def _absolute_cwd(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isabs(value):
            raise ValueError(f"cwd must be an absolute path, got {value!r}")
        return value

    @model_validator(mode="after")
    def _timeouts(self) -> ShellConfig:
        if self.timeout > self.max_timeout:
            raise ValueError(
                f"timeout ({self.timeout:g} s) is larger than max_timeout ({self.max_timeout:g} s)"
            )
        return self
