"""``agent_options`` accepted by in-process children."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dsh.core.agents import CutOffTurn
from dsh.core.models import ModelConfig
from dsh.core.permissions import SandboxConfig
from dsh.core.plugins import validation_problems
from dsh.subagent import InvalidRequest

__all__ = ["InProcessAgentOptions", "parse_agent_options"]


class InProcessAgentOptions(BaseModel):
    """What ``agent_options`` may set for an in-process child."""

    model_config = ConfigDict(extra="forbid")

    model: ModelConfig | None = None
    """The child's model (default: the parent's)."""
    max_steps: int | None = Field(None, ge=1)
    """Model calls allowed per turn (default: the context's)."""
    sandbox: SandboxConfig | None = None
    """Narrows the child's sandbox (``{ mode = "read-only" }``); a child never gets more
    than its parent: asking for more fails the start."""
    cut_off_turn: CutOffTurn = "continue"
    """Continuable children: what a cold resume does with the turn the child's process
    stopped in. ``continue`` (at least once): the turn is taken up again before the new
    message, a tool call that was running runs again and an unanswered model call is
    asked again. ``abort`` (at most once): the turn is closed ``aborted`` and the model
    is told the tool call was interrupted. Steps whose result is in the log never repeat."""


_EMPTY = InProcessAgentOptions()


def parse_agent_options(raw: Mapping[str, Any] | None) -> InProcessAgentOptions:
    """Validate ``agent_options``; unknown keys and bad values raise ``INVALID_REQUEST``."""
    if not raw:
        return _EMPTY
    try:
        return InProcessAgentOptions.model_validate(raw)
    except ValidationError as exc:
        problems = validation_problems(exc)
        raise InvalidRequest(f"invalid agent_options: {problems}") from None
