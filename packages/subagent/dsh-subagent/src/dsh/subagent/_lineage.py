"""Depth and lineage across process boundaries.

A child that runs in another process (``dsh acp``, ``dsh run`` started by a product's
shell tool, a remote ``dsh a2a``) must know how deep it is and what limit it
inherited, or a chain of processes could recurse without end. :class:`Lineage`
carries that: into a child's environment (``DSH_DELEGATION_DEPTH``,
``DSH_MAX_DEPTH``, ``DSH_PARENT_SESSION``, ``DSH_MAX_DESCENDANTS``) and into protocol
metadata (ACP ``_meta``, A2A message metadata) under the key ``dsh``; the child reads
it back and starts its root agent at that depth, under that limit.

A child in another process always gets a limit: when neither the request nor the
parent's own lineage sets one (``max_depth = "provider-managed"``), it is
:data:`DEFAULT_MAX_DEPTH`. So a chain of dsh processes that delegate to each other
(an ``acp`` row whose agent is ``dsh acp`` with the same preset) stops at that depth
whatever each preset says; only a numeric ``max_depth`` on the delegating row raises it.

A :class:`~dsh.subagent.Budget` on the request (already capped by what the parent's
tree has left) travels in the metadata too (``_meta.dsh.budget``): a ``dsh acp``
child puts its session's agent and everything it delegates under it.

The descendants budget (``max_descendants``) is a snapshot: the runs the parent's
tree may still start when this child starts (the child itself already counted). The
child's process caps its own tree at that number; it does not report back what it
used, so siblings started at the same time each get the same snapshot and a tree
spread over processes can start up to that many per process subtree, not in total.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dsh.subagent._types import Budget
from dsh.subagent._validation import effective_max_depth

if TYPE_CHECKING:
    from dsh.subagent._types import SubagentStartRequest

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEPTH_VARIABLE",
    "LINEAGE_EXTENSION_URI",
    "MAX_DEPTH_VARIABLE",
    "MAX_DESCENDANTS_VARIABLE",
    "PARENT_VARIABLE",
    "Lineage",
    "plain_value",
]

DEPTH_VARIABLE = "DSH_DELEGATION_DEPTH"
MAX_DEPTH_VARIABLE = "DSH_MAX_DEPTH"
PARENT_VARIABLE = "DSH_PARENT_SESSION"
MAX_DESCENDANTS_VARIABLE = "DSH_MAX_DESCENDANTS"
META_KEY = "dsh"
LINEAGE_EXTENSION_URI = "urn:dsh:a2a:extension:lineage:v1"
"""The A2A agent card extension of an agent that honours :class:`Lineage` in
``metadata.dsh`` (``dsh a2a`` declares it; the ``a2a`` provider's ``depth_limit``
requires it). A URN: an identifier that no web address has to back."""
DEFAULT_MAX_DEPTH = 5
"""The depth limit a child in another process runs under when nothing sets one."""


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where a child sits in a delegation tree: its ``depth`` (root agent 0), the
    ``max_depth`` it inherited (None: none), the parent's session id, and the
    descendants budget it inherited (``max_descendants``; None: none), and the
    :class:`~dsh.subagent.Budget` the child runs under (None: none)."""

    depth: int = 0
    max_depth: int | None = None
    parent_session: str | None = None
    max_descendants: int | None = None
    budget: Budget | None = None

    @classmethod
    def of_request(cls, request: SubagentStartRequest) -> Lineage:
        """The lineage of the child ``request`` starts (call it once the runtime has
        admitted the start, as providers do: the budget then excludes the child)."""
        parent = request.parent
        meta = parent.session.header.meta
        budget: int | None = None
        ctx = parent.ctx
        if ctx.has_service("subagents"):
            budget = ctx.subagents.descendants_budget(parent)
        limit = effective_max_depth(meta, request.max_depth)
        if limit is None:
            limit = DEFAULT_MAX_DEPTH
        return cls(parent.depth + 1, limit, parent.id, budget, request.budget)

    def env(self) -> dict[str, str]:
        """Environment entries for a child process."""
        env = {DEPTH_VARIABLE: str(self.depth)}
        if self.max_depth is not None:
            env[MAX_DEPTH_VARIABLE] = str(self.max_depth)
        if self.parent_session is not None:
            env[PARENT_VARIABLE] = self.parent_session
        if self.max_descendants is not None:
            env[MAX_DESCENDANTS_VARIABLE] = str(self.max_descendants)
        return env

    def meta(self) -> dict[str, Any]:
        """The ``dsh`` object for protocol metadata (``{"depth", "maxDepth",
        "parentSession", "maxDescendants", "budget"}``)."""
        data: dict[str, Any] = {"depth": self.depth}
        if self.max_depth is not None:
            data["maxDepth"] = self.max_depth
        if self.parent_session is not None:
            data["parentSession"] = self.parent_session
        if self.max_descendants is not None:
            data["maxDescendants"] = self.max_descendants
        if self.budget is not None:
            data["budget"] = self.budget.to_json()
        return data

    def session_meta(self) -> dict[str, Any]:
        """Session header meta for the child's root agent (``delegation_depth``,
        ``max_depth``, ``max_descendants``: the runtime caps that agent's tree by it)."""
        meta: dict[str, Any] = {"delegation_depth": self.depth}
        if self.max_depth is not None:
            meta["max_depth"] = self.max_depth
        if self.max_descendants is not None:
            meta["max_descendants"] = self.max_descendants
        return meta

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Lineage | None:
        """Read :meth:`env` entries (None when there are none); malformed values raise
        ``ValueError`` naming the variable."""
        if DEPTH_VARIABLE not in environ:
            return None
        depth = _non_negative(environ[DEPTH_VARIABLE], DEPTH_VARIABLE)
        raw_limit = environ.get(MAX_DEPTH_VARIABLE)
        limit = _non_negative(raw_limit, MAX_DEPTH_VARIABLE) if raw_limit else None
        raw_budget = environ.get(MAX_DESCENDANTS_VARIABLE)
        budget = _non_negative(raw_budget, MAX_DESCENDANTS_VARIABLE) if raw_budget else None
        return cls(depth, limit, environ.get(PARENT_VARIABLE) or None, budget)

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any] | None) -> Lineage | None:
        """Read the ``dsh`` object of protocol metadata (None when absent); malformed
        values raise ``ValueError``."""
        if not isinstance(meta, Mapping):
            return None
        data = meta.get(META_KEY)
        if not isinstance(data, Mapping) or "depth" not in data:
            return None
        depth = _non_negative(data["depth"], "_meta.dsh.depth")
        limit = data.get("maxDepth")
        parent = data.get("parentSession")
        budget = data.get("maxDescendants")
        caps = data.get("budget")
        if caps is not None and not isinstance(caps, Mapping):
            raise ValueError(f"_meta.dsh.budget must be an object of caps, got {caps!r}")
        return cls(
            depth,
            _non_negative(limit, "_meta.dsh.maxDepth") if limit is not None else None,
            parent if isinstance(parent, str) else None,
            _non_negative(budget, "_meta.dsh.maxDescendants") if budget is not None else None,
            _budget(caps) if caps else None,
        )

    def deeper_than_allowed(self) -> str | None:
        """The refusal if this child is already deeper than its limit, else None."""
        if self.max_depth is not None and self.depth > self.max_depth:
            return f"subagent depth {self.depth} exceeds max_depth {self.max_depth}"
        return None


def plain_value(value: Any) -> Any:
    """A protobuf ``Struct`` / ``ListValue`` (A2A metadata, or a value inside one) as
    plain Python: dicts, lists, strings, numbers (floats), booleans and None."""
    if isinstance(value, str | bool | int | float) or value is None:
        return value
    if isinstance(value, Mapping):  # Struct (a registered Mapping)
        return {str(key): plain_value(item) for key, item in value.items()}
    return [plain_value(item) for item in value]  # ListValue


_WHOLE_CAPS = frozenset(("tokens", "children", "turns"))


def _budget(caps: Mapping[str, Any]) -> Budget:
    # (A2A metadata is a protobuf Struct: its numbers arrive as floats)
    values = {
        str(key): int(value)
        if key in _WHOLE_CAPS and isinstance(value, float) and value.is_integer()
        else value
        for key, value in caps.items()
    }
    try:
        return Budget.from_json(values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"_meta.dsh.budget: {exc}") from None


def _non_negative(value: object, what: str) -> int:
    try:
        number = int(value)  # type: ignore[call-overload]
        assert isinstance(number, int)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}") from None
    if isinstance(value, bool) or number < 0 or (isinstance(value, float) and value != number):
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return number
