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
    "BUDGET_CAPS",
    "KNOWN_STOP_REASONS",
    "NO_START_CAPABILITIES",
    "Budget",
    "SubagentCapabilities",
    "SubagentResult",
    "SubagentStartRequest",
    "SubagentStopReason",
    "ToolFilter",
]

SubagentStopReason = Literal["completed", "aborted", "error", "max-tokens", "refusal", "budget"]
KNOWN_STOP_REASONS: frozenset[str] = frozenset(
    ("completed", "aborted", "error", "max-tokens", "refusal", "budget")
)
"""Consumers treat any other stop reason as a failure."""


@dataclass(frozen=True, slots=True)
class SubagentCapabilities:
    """Which optional start-request fields a provider honours."""

    output_schema: bool = False
    depth_limit: bool = False
    tool_filter: bool = False
    persona: bool = False
    budget: bool = False
    """Enforces :attr:`SubagentStartRequest.budget` (and a budget the parent's tree has)."""

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
        if request.budget is not None and not self.budget:
            return "budget"
        return None


NO_START_CAPABILITIES = SubagentCapabilities()
"""No optional start fields (out-of-process providers)."""

ALL_START_CAPABILITIES = SubagentCapabilities(True, True, True, True, True)

BUDGET_CAPS = ("tokens", "usd", "seconds", "children", "turns")
"""The caps a :class:`Budget` may set, in the order they are checked and reported."""

_BUDGET_RULES: dict[str, tuple[type | tuple[type, ...], bool, str]] = {
    "tokens": (int, True, "a positive integer (input + output tokens)"),
    "usd": ((int, float), True, "a positive number of US dollars"),
    "seconds": ((int, float), True, "a positive number of seconds (wall time)"),
    "children": (int, False, "a non-negative integer (delegations started)"),
    "turns": (int, True, "a positive integer (model calls)"),
}
"""Per cap: the accepted types, whether 0 is refused, and what the error asks for."""


@dataclass(frozen=True, slots=True)
class Budget:
    """Caps on what a run and everything below it may spend (None: no cap).

    * ``tokens`` — input + output tokens of every model call;
    * ``usd`` — cost in US dollars, from the ``cost_usd`` the model reports (a model
      that reports no cost cannot run under a ``usd`` cap: refused at start where the
      adapter says so, else the run fails at its first unpriced call);
    * ``seconds`` — wall time since the run started;
    * ``children`` — delegations started (the whole subtree counted); the start
      beyond the cap is refused;
    * ``turns`` — model calls (one per step of the agent loop: a child that loops on
      tools makes one model call per round of tool calls).

    Every cap counts the run and all runs below it. A child never gets more than
    what its parent's budget has left (computed when the child starts). A run that
    reaches a cap is stopped like a cancel and settles with stop reason ``budget``.
    """

    tokens: int | None = None
    usd: float | None = None
    seconds: float | None = None
    children: int | None = None
    turns: int | None = None

    def __post_init__(self) -> None:
        for name in BUDGET_CAPS:
            value = getattr(self, name)
            if value is None:
                continue
            kinds, positive, what = _BUDGET_RULES[name]
            bad = isinstance(value, bool) or not isinstance(value, kinds)
            if not bad:  # (NaN compares unequal to itself)
                bad = value != value or value < 0 or (positive and value == 0)
            if bad:
                raise ValueError(
                    f"budget {name} must be {what}, got {value!r}; leave {name} unset for no cap"
                )

    @property
    def empty(self) -> bool:
        """True when no cap is set."""
        return all(getattr(self, name) is None for name in BUDGET_CAPS)

    def to_json(self) -> dict[str, Any]:
        """The caps that are set, as a JSON object."""
        out: dict[str, Any] = {}
        for name, value in zip(
            BUDGET_CAPS,
            (self.tokens, self.usd, self.seconds, self.children, self.turns),
            strict=True,
        ):
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Budget:
        """Read :meth:`to_json` output; an unknown key raises ``ValueError`` naming it."""
        unknown = sorted(set(data) - set(BUDGET_CAPS))
        if unknown:
            raise ValueError(
                f"unknown budget cap {unknown[0]!r}; the caps are {', '.join(BUDGET_CAPS)}"
            )
        return cls(**{name: data[name] for name in BUDGET_CAPS if name in data})

    def within(self, other: Budget | None) -> Budget:
        """Each cap the smaller of this one's and ``other``'s (None: the other's)."""
        if other is None:
            return self
        values: dict[str, Any] = {}
        for name in BUDGET_CAPS:
            mine, theirs = getattr(self, name), getattr(other, name)
            values[name] = theirs if mine is None else mine if theirs is None else min(mine, theirs)
        return Budget(**values)


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
    matching capability; ``max_depth`` needs ``depth_limit``, ``budget`` (a
    :class:`Budget`) needs ``budget``.
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
    budget: Budget | None = None

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
