"""Configuration of one ``acp`` provider instance (one ``[[plugin]]`` row)."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "AcpProviderConfig"]

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest JSON-RPC line accepted from an agent (a runaway line fails the run)."""


class AcpProviderConfig(BaseModel):
    """Config of ``dsh-subagent-acp``: which agent command to run, and how.

    ::

        [[plugin]]
        name = "dsh-subagent-acp"
        config = { command = "dsh", args = ["acp", "--preset", "/etc/dsh/child.toml"] }
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field("acp", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    """Provider name in ``ctx.subagents``; give each row its own to run several agents."""
    command: str = Field(..., min_length=1)
    """The agent executable (looked up on the child's ``PATH``)."""
    args: list[str] = []
    """Arguments after ``command``."""
    cwd: str | None = None
    """Absolute directory the agent runs in and its ACP session uses.
    Unset: the parent session's cwd."""
    env: dict[str, str] = {}
    """Variables set on top of the credential-scrubbed environment (API keys go here)."""
    permission: Literal["reject", "allow"] = "reject"
    """How the agent's permission requests are answered: ``reject`` selects a
    reject option, ``allow`` an allow-once option."""
    eof_grace: float = Field(2.0, ge=0)
    """Seconds the agent gets to exit after its stdin closes, before SIGTERM."""
    term_grace: float = Field(2.0, ge=0)
    """Seconds the agent's process group gets after SIGTERM, before SIGKILL."""
    cancel_grace: float = Field(5.0, ge=0)
    """Seconds to wait for the agent to confirm ``session/cancel`` before the run
    settles ``aborted`` anyway."""
    startup_timeout: float = Field(60.0, gt=0)
    """Seconds the agent gets to answer ``initialize`` and ``session/new`` (its
    boot time included: it starts while the ACP client library loads)."""
    turn_timeout: float | None = Field(None, gt=0)
    """Seconds the agent may take to answer the prompt (None: no limit; the
    parent can always cancel)."""
    stdout_garbage: Literal["error", "skip"] = "error"
    """What a line on the agent's stdout that is not JSON does: fail the run
    (``error``), or get skipped (``skip``, for agents that print banners)."""
    max_message_bytes: int = Field(DEFAULT_MAX_MESSAGE_BYTES, ge=1024)
    """Largest single message accepted from the agent."""

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isabs(value):
            raise ValueError(f"cwd must be an absolute path, got {value!r}")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"invalid environment variable name {name!r}")
        return value

    @property
    def argv(self) -> list[str]:
        """The agent's command line."""
        return [self.command, *self.args]
