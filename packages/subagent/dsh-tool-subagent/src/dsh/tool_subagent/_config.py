"""Configuration of one ``subagent`` tool instance."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dsh.subagent import Budget, InvalidRequest, ToolFilter
from dsh.subagent.kit import check_output_schema

__all__ = ["BudgetConfig", "SubagentToolConfig", "ToolFilterConfig"]


class ToolFilterConfig(BaseModel):
    """Which global tools the child may use: ``allow`` (None: all), minus ``deny``."""

    model_config = ConfigDict(extra="forbid")

    allow: list[str] | None = None
    """The global tools the child may use, by name (unset: all of them)."""
    deny: list[str] = []
    """Tools the child may not use, whatever ``allow`` says."""

    def to_filter(self) -> ToolFilter:
        """The interface's :class:`~dsh.subagent.ToolFilter`."""
        return ToolFilter(
            allow=tuple(self.allow) if self.allow is not None else None, deny=tuple(self.deny)
        )


class BudgetConfig(BaseModel):
    """Caps on what every child this tool starts may spend, its own delegations
    included (unset: no cap); a child never gets more than its parent's tree has left.
    A child that reaches one is stopped and the model is told it ran out of budget."""

    model_config = ConfigDict(extra="forbid")

    tokens: int | None = Field(None, ge=1, strict=True)
    """Input + output tokens of every model call."""
    usd: float | None = Field(None, gt=0)
    """Cost in US dollars, from the cost the model reports (a model that reports none
    cannot run under this cap: the start, or the first unpriced call, fails)."""
    seconds: float | None = Field(None, gt=0)
    """Wall time from the child's start."""
    children: int | None = Field(None, ge=0, strict=True)
    """Delegations started below the child (all depths); the next one is refused."""
    turns: int | None = Field(None, ge=1, strict=True)
    """Model calls (one per step of the agent loop, all depths)."""

    @cached_property
    def budget(self) -> Budget:
        """The interface's :class:`~dsh.subagent.Budget` (built once per row)."""
        return Budget(self.tokens, self.usd, self.seconds, self.children, self.turns)


class SubagentToolConfig(BaseModel):
    """Config of ``dsh-tool-subagent``: one tool bound to one provider.

    The model sees only ``description`` and ``prompt`` (and ``run_in_background``
    where enabled); everything here is fixed by whoever wrote the preset.
    """

    model_config = ConfigDict(extra="forbid")

    provider: str
    """The provider that runs the children, by its name in ``ctx.subagents``
    (``spawn``, ``fork``, ``acp``, ``codex``...); the tool exists while it is registered."""
    tool_name: str = Field("subagent", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """The tool's name as the model sees it; give each row its own."""
    max_depth: int | Literal["provider-managed"] = 3
    """Delegation depth cap (children of depth > max_depth are refused), or
    ``"provider-managed"`` to send no limit (providers without ``depth_limit``)."""
    persona: str | None = None
    """Instructions the child gets as its persona (needs a provider with the
    ``persona`` capability)."""
    tool_filter: ToolFilterConfig | None = None
    """Which global tools the child may use, ``{ allow = [...], deny = [...] }`` (needs
    a provider with the ``tool_filter`` capability)."""
    agent_options: dict[str, Any] | None = None
    """Provider-specific options sent with every start (the request's ``agent_options``)."""
    enable_run_in_background: bool = False
    """The model also sees ``run_in_background``: such a call returns at once and the
    run goes on in the background (``background_mode`` says how)."""
    background_mode: Literal["one-shot", "continuable"] = "one-shot"
    """``one-shot``: a background call is a job (dsh-tool-jobs collects it);
    ``continuable``: a child the model can send further messages to (needs a provider
    that has continuable children: ``spawn``, ``fork``)."""
    description: str | None = None
    """Replaces the tool's default description."""
    output_schema: dict[str, Any] | None = None
    """A JSON Schema (object-rooted) the child's answer must follow: the child gets a
    ``structured_output`` tool and the result is that object (needs a provider with the
    ``output_schema`` capability: spawn, fork; ``dsh mcp`` serves it as the tool's
    ``outputSchema``)."""
    budget: BudgetConfig | None = None
    """Caps for every child this tool starts, ``{ tokens = 20000, usd = 0.50, seconds =
    300, children = 10, turns = 8 }`` (needs a provider with the ``budget`` capability:
    spawn, fork)."""

    @field_validator("max_depth")
    @classmethod
    def _non_negative(cls, value: int | str) -> int | str:
        if isinstance(value, int) and (isinstance(value, bool) or value < 0):
            raise ValueError(
                f"max_depth must be a non-negative integer or 'provider-managed', got {value!r}"
            )
        return value

    @field_validator("output_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                check_output_schema(value)
            except InvalidRequest as exc:
                raise ValueError(exc.message) from None
        return value

    @property
    def numeric_max_depth(self) -> int | None:
        """``max_depth`` as sent in requests (None for provider-managed)."""
        return self.max_depth if isinstance(self.max_depth, int) else None
