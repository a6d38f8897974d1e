"""The descendants budget: how many runs one root agent's delegation tree may start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsh.subagent._errors import CapacityExceeded

if TYPE_CHECKING:
    from dsh.core import Agent, Context

__all__ = ["DESCENDANTS_META", "DescendantsBudget"]

DESCENDANTS_META = "max_descendants"
"""Session-header meta key of a root agent's descendants budget (set from the
:class:`~dsh.subagent.kit.Lineage` of a child process's parent)."""
_ROOTS_LIMIT = 10_000
"""Root agents whose descendants the budget keeps counting (the oldest go first)."""
_MAX_CHAIN = 256


class DescendantsBudget:
    """Counts the runs started below each root agent, against ``max_descendants``
    (the configured cap, or the smaller one a root agent inherited in its session
    header). A tree with no cap counts nothing."""

    __slots__ = ("_counts", "_ctx", "cap")

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._counts: dict[str, int] = {}
        """Runs started so far below each root agent (its descendants, all depths)."""
        self.cap: int | None = None
        """The configured ``max_descendants`` (None: none)."""

    def root_of(self, agent: Agent) -> Agent:
        """The topmost live agent above ``agent`` (itself for a root agent)."""
        agents = self._ctx.agents
        root = agent
        for _ in range(_MAX_CHAIN):
            parent_id = root.parent_id
            if parent_id is None:
                break
            upper = agents.get(parent_id)
            if upper is None:
                break
            root = upper
        return root

    def cap_of(self, root: Agent) -> int | None:
        """The ``max_descendants`` of the tree under ``root`` (None: no cap)."""
        cap = self.cap
        inherited = root.session.header.meta.get(DESCENDANTS_META)
        if isinstance(inherited, int) and not isinstance(inherited, bool) and inherited >= 0:
            cap = inherited if cap is None else min(cap, inherited)
        return cap

    def count(self, agent: Agent) -> tuple[int, int | None]:
        """Runs started so far in ``agent``'s tree, and the tree's cap (None: none)."""
        root = self.root_of(agent)
        return self._counts.get(root.id, 0), self.cap_of(root)

    def take(self, parent: Agent) -> str | None:
        """Count one more descendant of ``parent``'s root agent; raises
        ``CAPACITY_EXCEEDED`` when the tree is at its cap. Returns what to
        :meth:`refund` (None: nothing was counted, the tree has no cap)."""
        root = parent if parent.parent_id is None else self.root_of(parent)
        if self.cap is None and DESCENDANTS_META not in root.session.header.meta:
            return None  # no cap on this tree: nothing to count (every start passes here)
        cap = self.cap_of(root)
        if cap is None:
            return None
        counts = self._counts
        count = counts.get(root.id, 0)
        if count >= cap:
            raise CapacityExceeded(
                f"the delegation tree already has {count} descendants (max_descendants ="
                f" {cap}); finish with what you have, or do the rest of the work yourself"
                " without delegating"
            )
        counts[root.id] = count + 1
        if len(counts) > _ROOTS_LIMIT:
            del counts[next(iter(counts))]
        return root.id

    def refund(self, root: str | None) -> None:
        """Uncount a run that never started (its start raised or failed)."""
        if root is not None and self._counts.get(root, 0) > 0:
            self._counts[root] -= 1
