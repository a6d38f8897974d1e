"""What every out-of-process provider shares by name: its time limits
(:class:`RemoteTimeouts`), the stage a failure happened in (:class:`Stages`), and the
capabilities a row declares for its peer (:func:`peer_capabilities`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dsh.subagent._types import NO_START_CAPABILITIES, SubagentCapabilities

__all__ = ["DEFAULT_TURN_TIMEOUT", "RemoteTimeouts", "Stages", "peer_capabilities"]

DEFAULT_TURN_TIMEOUT = 900.0
"""Seconds a remote child's turn may take by default before it is stopped and the run
settles ``error`` (a model server that never answers would otherwise hang it)."""


class RemoteTimeouts(BaseModel):
    """The time limits every out-of-process provider takes, with the same names."""

    model_config = ConfigDict(extra="forbid")

    start_timeout: float = Field(60.0, gt=0)
    """Seconds the child gets to start and finish its handshake."""
    turn_timeout: float | None = Field(DEFAULT_TURN_TIMEOUT, gt=0)
    """Seconds the turn may take before it is stopped and the run settles ``error``.
    ``0`` (or ``None`` from code) means no limit; the parent can always cancel."""
    cancel_grace: float = Field(5.0, ge=0)
    """Seconds a cancelled child gets to confirm before it is stopped anyway (not
    waited when the cancel request could not be sent)."""

    @field_validator("turn_timeout", mode="before")
    @classmethod
    def _zero_is_no_limit(cls, value: Any) -> Any:
        # TOML has no null: 0 says "no limit" in a preset
        return None if value == 0 and not isinstance(value, bool) else value


class Stages:
    """Which stage a run is in, so a failure's diagnostic can name it.

    ``stages.enter("initialize")`` ... a failure then reads
    ``codex initialize failed: <reason>``.
    """

    __slots__ = ("current", "provider")

    def __init__(self, provider: str, first: str = "start") -> None:
        self.provider = provider
        self.current = first

    def enter(self, stage: str) -> None:
        """Mark the start of ``stage``."""
        self.current = stage

    def describe(self, error: BaseException) -> str:
        """A diagnostic for ``error`` naming the current stage."""
        reason = getattr(error, "message", None)
        if not isinstance(reason, str) or not reason:
            reason = str(error)
            if not reason:
                reason = type(error).__name__
            elif not isinstance(error, OSError | TimeoutError):
                reason = f"{type(error).__name__}: {reason}"
        return f"{self.provider} {self.current} failed: {reason}"


def peer_capabilities(depth_limit: bool, budget: bool) -> SubagentCapabilities:
    """The start capabilities of a provider whose child is another agent that may be a
    dsh (acp, a2a): ``depth_limit`` and ``budget`` as its row declares the agent honours
    them (the start then checks the agent confirms it); nothing else."""
    if depth_limit or budget:
        return SubagentCapabilities(depth_limit=depth_limit, budget=budget)
    return NO_START_CAPABILITIES
