"""The vocabulary of the seam: capabilities, requests, results, stop reasons."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from dsh.core import AbortSignal, Content, text_of
from dsh.core.models import as_blocks
from dsh.subagent._diagnostics import cap_diagnostic
from dsh.subagent._progress import SubagentUsage

if TYPE_CHECKING:
    from dsh.core import Agent

__all__ = [
    "ALL_START_CAPABILITIES",
    "KNOWN_STOP_REASONS",
    "NO_START_CAPABILITIES",
    "SubagentCapabilities",
    "SubagentResult",
    "SubagentStartRequest",
    "SubagentStopReason",
    "ToolFilter",
]

SubagentStopReason = Literal["completed", "aborted", "error", "max-tokens", "refusal"]
KNOWN_STOP_REASONS: frozenset[str] = frozenset(
    ("completed", "aborted", "error", "max-tokens", "refusal")
)
"""Consumers treat any other stop reason as a failure."""


@dataclass(frozen=True, slots=True)
class SubagentCapabilities:
    """Which optional start-request fields a provider honours."""

    output_schema: bool = False
    depth_limit: bool = False
    tool_filter: bool = False
    persona: bool = False

    def missing_for(self, request: SubagentStartRequest) -> str | None:
        """The first capability ``request`` needs and this lacks, in the documented order."""
        if request.output_schema is not None and not self.output_schema:
            return "output_schema"
        if request.max_depth is not None and not self.depth_limit:
            return "depth_limit"
        if request.tool_filter is not None and not self.tool_filter:
            return "tool_filter"
        if request.persona is not None and not self.persona:
            return "persona"
        return None


NO_START_CAPABILITIES = SubagentCapabilities()
"""No optional start fields (out-of-process providers)."""

ALL_START_CAPABILITIES = SubagentCapabilities(True, True, True, True)


@dataclass(frozen=True, slots=True)
class ToolFilter:
    """Restrict a child's global tools: ``allow`` (None: all) then minus ``deny``."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.allow, str) or isinstance(self.deny, str):
            raise TypeError("ToolFilter.allow / deny take a sequence of tool names, not a string")
        if self.allow is not None:
            object.__setattr__(self, "allow", tuple(self.allow))
        object.__setattr__(self, "deny", tuple(self.deny))


@dataclass(slots=True)
class SubagentStartRequest:
    """What a caller asks a provider to run.

    ``prompt`` is a list of content blocks (a string is wrapped). ``signal``
    cancels the run before and after publication. The optional fields need the
    matching capability; ``max_depth`` needs ``depth_limit``.
    """

    prompt: Content
    parent: Agent
    signal: AbortSignal
    label: str | None = None
    agent_options: Mapping[str, Any] | None = None
    output_schema: Mapping[str, Any] | None = None
    max_depth: int | None = None
    tool_filter: ToolFilter | None = None
    persona: str | None = None

    def __post_init__(self) -> None:
        self.prompt = as_blocks(self.prompt)

    @property
    def prompt_blocks(self) -> list[dict[str, Any]]:
        """The prompt as content blocks."""
        return self.prompt  # type: ignore[return-value]

    @property
    def prompt_text(self) -> str:
        """The text of the prompt's text blocks."""
        return text_of(self.prompt_blocks)


@dataclass(frozen=True, slots=True)
class SubagentResult:
    """How a run ended.

    ``output`` is the last non-empty assistant message; ``diagnostic`` is safe text
    capped at 4096 UTF-8 bytes (capped here, whoever builds the result); ``usage``
    is always a :class:`~dsh.subagent.SubagentUsage` (a mapping given here is read
    into one; none at all is ``incomplete``).
    """

    output: str
    stop_reason: str
    structured: Any = None
    diagnostic: str | None = None
    usage: SubagentUsage = field(default_factory=SubagentUsage.unknown)

    def __post_init__(self) -> None:
        if self.diagnostic is not None:
            object.__setattr__(self, "diagnostic", cap_diagnostic(self.diagnostic))
        usage = self.usage
        if type(usage) is not SubagentUsage:
            object.__setattr__(
                self,
                "usage",
                SubagentUsage.from_json(usage),
            )

    @property
    def ok(self) -> bool:
        """True for stop reason ``completed``."""
        return self.stop_reason == "completed"

    @classmethod
    def failed(
        cls, diagnostic: str, *, output: str = "", usage: SubagentUsage | None = None
    ) -> SubagentResult:
        """An ``error`` result."""
        return cls(output, "error", diagnostic=diagnostic, usage=usage or _UNKNOWN)

    @classmethod
    def aborted(
        cls, reason: str | None = None, *, output: str = "", usage: SubagentUsage | None = None
    ) -> SubagentResult:
        """An ``aborted`` result."""
        return cls(output, "aborted", diagnostic=reason, usage=usage or _UNKNOWN)


_UNKNOWN = SubagentUsage.unknown()
