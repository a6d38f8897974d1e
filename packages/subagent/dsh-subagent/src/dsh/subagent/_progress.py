"""What a running child reports along the way (:class:`SubagentProgress`) and what a
run cost (:class:`SubagentUsage`): one vocabulary for every transport."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, get_args

__all__ = [
    "PROGRESS_KINDS",
    "ProgressKind",
    "SubagentProgress",
    "SubagentUsage",
    "ToolStatus",
    "UsageReport",
]

ProgressKind = Literal[
    "text",
    "thinking",
    "tool_call",
    "tool_update",
    "usage",
    "child_start",
    "child_end",
    "notice",
    "queued",
]
PROGRESS_KINDS: frozenset[str] = frozenset(get_args(ProgressKind))
ToolStatus = Literal["running", "completed", "failed"]

_USAGE_INDEX = {
    "input_tokens": 0,
    "output_tokens": 1,
    "cached_input_tokens": 2,
    "reasoning_tokens": 3,
    "cost_usd": 4,
}
"""Position of each field :meth:`SubagentUsage.from_json` reads (``incomplete`` aside)."""
_COST = _USAGE_INDEX["cost_usd"]
_NUMBER = (int, float)


@dataclass(frozen=True, slots=True, eq=False)
class SubagentUsage(Mapping[str, Any]):
    """Tokens (and cost, where the transport says) a run used.

    ``incomplete`` is True when the transport reported nothing, or only part of the
    run (a totals figure that includes such a run is incomplete too). Reads like a
    mapping as well (``usage["input_tokens"]``), keys limited to the fields that are set.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost_usd: float | None = None
    incomplete: bool = False

    @classmethod
    def unknown(cls) -> SubagentUsage:
        """Usage of a run whose transport reported none."""
        return _UNKNOWN

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> SubagentUsage:
        """Read a mapping (``None`` or empty: :meth:`unknown`); unknown keys are ignored
        and ill-typed values make the usage incomplete instead of failing."""
        if not data:
            return _UNKNOWN
        if len(data) == 2:  # the common report: input and output tokens only, no loop
            given_in = data.get("input_tokens")
            given_out = data.get("output_tokens")
            if (
                type(given_in) is int
                and type(given_out) is int
                and given_in >= 0
                and given_out >= 0
            ):
                return cls(given_in, given_out)
        # (one pass over the mapping's own items, no look-up call per known key, and
        # positional construction: this runs once per model call of every child, on
        # the delegation hot path)
        values: list[Any] = [0, 0, None, None, None]
        incomplete = False
        seen = False
        for name, raw in data.items():
            if name not in _USAGE_INDEX:
                if name == "incomplete":
                    incomplete = incomplete or bool(raw)
                continue
            if raw is None:
                continue
            index = _USAGE_INDEX[name]
            if type(raw) is int and raw >= 0 and index != _COST:
                values[index] = raw  # the common case: a token count
            elif isinstance(raw, bool) or not isinstance(raw, _NUMBER) or raw < 0:
                incomplete = True
                continue
            else:
                values[index] = float(raw) if index == _COST else int(raw)
            seen = True
        if not seen:
            return _UNKNOWN
        return cls(values[0], values[1], values[2], values[3], values[4], incomplete)

    def __add__(self, other: SubagentUsage) -> SubagentUsage:
        return SubagentUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            _add(self.cached_input_tokens, other.cached_input_tokens),
            _add(self.reasoning_tokens, other.reasoning_tokens),
            _add(self.cost_usd, other.cost_usd),
            self.incomplete or other.incomplete,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    # Mapping view ---------------------------------------------------------------------
    # (plain loops, no generators)

    def _names(self) -> list[str]:
        return [
            name
            for name in _USAGE_FIELDS
            if (value := getattr(self, name)) is not None and value is not False
        ]

    def to_json(self) -> dict[str, Any]:
        """The fields that are set, as a JSON object (the same as ``dict(usage)``)."""
        # (built field by field, no loop: a tool result copies the usage once per
        # delegation; the token counts are always set, the rest only when not None)
        out: dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.cached_input_tokens is not None:
            out["cached_input_tokens"] = self.cached_input_tokens
        if self.reasoning_tokens is not None:
            out["reasoning_tokens"] = self.reasoning_tokens
        if self.cost_usd is not None:
            out["cost_usd"] = self.cost_usd
        if self.incomplete:
            out["incomplete"] = True
        return out

    def __getitem__(self, key: str) -> Any:
        if key in _USAGE_FIELD_SET:
            value = getattr(self, key)
            if value is not None and value is not False:
                return value
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        if key in _USAGE_FIELD_SET:
            value = getattr(self, key)  # (a field name, checked above)
            return value is not None and value is not False
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


def _add(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


_UNKNOWN = SubagentUsage(incomplete=True)
_USAGE_FIELDS = tuple(item.name for item in fields(SubagentUsage))
_USAGE_FIELD_SET = frozenset(_USAGE_FIELDS)


@dataclass(frozen=True, slots=True)
class SubagentProgress:
    """One thing a child did, as it happened; the same vocabulary from every provider.

    ``kind``:

    * ``text`` / ``thinking`` — a delta of assistant text / reasoning (``text``);
    * ``tool_call`` — a tool call started (``tool_call_id``, ``name``, ``title``,
      ``arguments`` where the transport says);
    * ``tool_update`` — a tool call moved on (``tool_call_id``, ``status`` running /
      completed / failed, ``text``: a short excerpt of its output);
    * ``usage`` — running token counts of the run (``usage``);
    * ``child_start`` / ``child_end`` — a nested delegation inside the child
      (``run_id``, ``provider``, ``label``; ``stop_reason`` at the end);
    * ``notice`` — something the transport reported that is not the answer (``text``);
    * ``queued`` — the run waits for a slot (``position``, 1 = next).

    ``path`` names the nested runs between the run being watched and the item's
    source, outermost first: ``()`` for items about the run itself, ``(g,)`` for a
    grandchild ``g``'s own items (its ``child_start`` and ``child_end`` included).
    """

    kind: ProgressKind
    path: tuple[str, ...] = ()
    text: str | None = None
    tool_call_id: str | None = None
    name: str | None = None
    title: str | None = None
    arguments: Any = None
    status: ToolStatus | None = None
    usage: SubagentUsage | None = None
    run_id: str | None = None
    provider: str | None = None
    label: str | None = None
    stop_reason: str | None = None
    position: int | None = None

    def nested(self, run_id: str) -> SubagentProgress:
        """This item as seen from one level up: ``run_id`` prepended to the path."""
        return replace(self, path=(run_id, *self.path))

    def to_json(self) -> dict[str, Any]:
        """A JSON object with the fields that are set (``path`` always)."""
        out: dict[str, Any] = {"kind": self.kind, "path": list(self.path)}
        for item in fields(self):
            name = item.name
            if name in ("kind", "path"):
                continue
            value = getattr(self, name)
            if value is None:
                continue
            out[name] = value.to_json() if name == "usage" else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SubagentProgress:
        """Read :meth:`to_json` output (from another process); raises ``ValueError``
        for an unknown kind or ill-typed fields."""
        kind = data.get("kind")
        if kind not in PROGRESS_KINDS:
            raise ValueError(f"unknown progress kind {kind!r}")
        path = data.get("path", ())
        if not isinstance(path, list | tuple) or not all(isinstance(p, str) for p in path):
            raise ValueError("progress path must be a list of run ids")
        values: dict[str, Any] = {}
        for name in ("text", "tool_call_id", "name", "title", "run_id", "provider", "label"):
            value = data.get(name)
            if value is not None:
                if not isinstance(value, str):
                    raise ValueError(f"progress field {name} must be a string")
                values[name] = value
        status = data.get("status")
        if status is not None:
            if status not in ("running", "completed", "failed"):
                raise ValueError(f"unknown tool status {status!r}")
            values["status"] = status
        stop = data.get("stop_reason")
        if stop is not None:
            values["stop_reason"] = str(stop)
        position = data.get("position")
        if isinstance(position, int) and not isinstance(position, bool):
            values["position"] = position
        if "arguments" in data:
            values["arguments"] = data["arguments"]
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            values["usage"] = SubagentUsage.from_json(usage)
        return cls(kind, tuple(path), **values)


@dataclass(frozen=True, slots=True)
class UsageReport:
    """What a delegation tree cost (``ctx.subagents.usage(agent)``): every run below
    the agent, nested runs included, and their total. ``incomplete`` if any run's
    transport reported nothing or only part of it."""

    total: SubagentUsage
    runs: Mapping[str, SubagentUsage]

    @property
    def incomplete(self) -> bool:
        """True if any part of the total is missing."""
        return self.total.incomplete

    def to_json(self) -> dict[str, Any]:
        """``{"total": {...}, "runs": {run_id: {...}}}``."""
        return {
            "total": self.total.to_json(),
            "runs": {run_id: usage.to_json() for run_id, usage in self.runs.items()},
        }
