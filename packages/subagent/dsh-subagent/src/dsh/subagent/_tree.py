"""The tree of published runs: their bus events, their nesting, their progress routing.

:class:`RunTree` is the runtime's record of the runs it published. For each run it
emits ``subagent/start`` and, at settlement, one ``subagent/end``; it knows which
run a child agent of this context belongs to (so a nested run's progress reaches
the runs above it, and a nested run borrows its ancestors' slots); it gives a run's
slots back when its dispose has finished. It touches a run only through the
handle's observer port (:meth:`~dsh.subagent.RunHandle.attach`, the read-only
properties, :meth:`~dsh.subagent.RunHandle.set_sink`).

Cost on a run nobody watches: the start event (skipped when nobody listens), one
small record, two dict entries while the run lives; no progress is routed or mapped.
The record of a run whose child is an agent of this context stays findable by that
agent's id until the run is disposed: it gives the agents above the child (a nested
run's lineage), the slots the run holds (borrowed by nested runs), and the run whose
subscribers want a nested run's progress.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dsh.subagent._admission import Gate
from dsh.subagent._diagnostics import cap_diagnostic, redact_secrets
from dsh.subagent._ledger import UsageLedger
from dsh.subagent._meter import BudgetMeters, spent_against
from dsh.subagent._progress import SubagentProgress
from dsh.subagent._run import RunHandle, SubagentRun, handle_of
from dsh.subagent._types import Budget, SubagentResult, SubagentStartRequest

if TYPE_CHECKING:
    from dsh.core import Agent, EventBus

__all__ = [
    "EVENT_END",
    "EVENT_PROGRESS",
    "EVENT_START",
    "RunTree",
]

EVENT_START = "subagent/start"
EVENT_END = "subagent/end"
EVENT_PROGRESS = "subagent/progress"
_MAX_CHAIN = 256


class RunTree:
    """The runtime's published runs (see the module docstring)."""

    __slots__ = ("_bus", "_by_child", "_live", "_release", "ledger", "meters")

    def __init__(
        self,
        bus: EventBus,
        release: Callable[[tuple[Gate, ...]], None],
        meters: BudgetMeters | None = None,
    ) -> None:
        self.meters = meters
        """The runtime's budget meters (a budgeted run's ``subagent/end`` says what it
        spent against each cap)."""
        self._bus = bus
        self._release = release
        self._live: dict[str, _Observed] = {}
        """Records of the runs published and not yet disposed, by run id."""
        self._by_child: dict[str, _Observed] = {}
        """Records of runs whose child is an agent of this context, by that agent's id
        (until the run is disposed)."""
        self.ledger = UsageLedger()
        """The usage of settled runs."""

    def live_runs(self) -> builtins.list[SubagentRun]:
        """Runs published and not yet disposed."""
        return [observed.handle.run for observed in self._live.values()]

    def unborrowed(self, gates: tuple[Gate, ...], agent: Agent) -> tuple[Gate, ...]:
        """``gates`` minus those a run above ``agent`` holds a slot in: a nested run
        borrows its ancestors' slots, so a run waiting for its own children can never
        hold the slot they wait for (no deadlock from nesting within one cap)."""
        held: set[Gate] = set()
        by_child = self._by_child
        agent_id: str | None = agent.id
        for _ in range(_MAX_CHAIN):
            observed = by_child.get(agent_id) if agent_id is not None else None
            if observed is None:
                break
            held.update(observed.held)
            child = observed.handle.local_agent
            agent_id = child.parent_id if child is not None else None
        if not held:
            return gates
        return tuple(gate for gate in gates if gate not in held)

    # -- publication -------------------------------------------------------------------

    def observe(
        self,
        run: SubagentRun,
        request: SubagentStartRequest,
        gates: tuple[Gate, ...] = (),
        *,
        queued: bool = False,
    ) -> None:
        """Emit ``subagent/start`` now and one ``subagent/end`` at settlement; route
        the run's progress (bus and the runs above it); give back ``gates`` when the
        run's dispose has finished."""
        parent = request.parent
        parent_id = parent.id
        bus = self._bus
        handle = handle_of(run)
        above = self._by_child.get(parent_id)  # (the run whose child is the parent)
        above_agents = (parent_id, *above.above) if above is not None else (parent_id,)
        observed = _Observed(self, handle, run.id, parent, above_agents, request.label)
        child = handle.local_agent
        budget = request.budget
        if budget is not None:
            observed.budget = budget
            if child is None:  # (a run in this process has a meter, which has the time)
                observed.started = time.monotonic()
        if bus.has_listeners(EVENT_START):
            base = observed.data()
            if queued:
                base["state"] = "queued"
            if budget is not None:
                base["budget"] = budget.to_json()
            bus.emit(EVENT_START, base, scope=parent_id)
        self._live[run.id] = observed
        observed.gates = observed.held = gates
        if child is not None:
            self._attach_child(observed, child)
        watched = False
        if above is not None and above.handle.wants_progress:
            watched = True
            self._forward(above.handle, SubagentProgress(
                "child_start", (run.id,), run_id=run.id, provider=run.provider,
                label=request.label,
            ))  # fmt: skip
        if watched or bus.has_listeners(EVENT_PROGRESS):
            handle.set_sink(self._route(parent_id))
        handle.attach(observed)  # (it turns on the runs below when progress is wanted)

    def started(self, outer: RunHandle, inner: RunHandle, gates: tuple[Gate, ...]) -> None:
        """A queued run started: its inner run's child agent is the outer run's, and
        the inner run holds the outer run's slots (``gates``) until it is disposed."""
        child = inner.local_agent
        observed = self._live.get(outer.id)
        if child is None or observed is None or observed.handle is not outer:
            return
        observed.held = gates
        self._attach_child(observed, child)

    def _attach_child(self, observed: _Observed, child: Agent) -> None:
        observed.child_id = child.id
        self._by_child[child.id] = observed

    # -- progress routing ----------------------------------------------------------------

    def _route(self, parent_id: str) -> Any:
        bus = self._bus

        def sink(handle: RunHandle, item: SubagentProgress) -> None:
            if bus.has_listeners(EVENT_PROGRESS):
                bus.emit(EVENT_PROGRESS, {"run_id": handle.id, "item": item}, scope=parent_id)
            above = self._by_child.get(parent_id)
            if above is not None and above.handle.wants_progress:
                self._forward(above.handle, item.nested(handle.id))

        return sink

    def _forward(self, handle: RunHandle, item: SubagentProgress) -> None:
        """Deliver a nested run's ``item`` (path already relative to ``handle``) to
        ``handle``'s subscribers, and on up the tree."""
        handle.deliver(item)
        parent = handle.local_agent
        owner = parent.parent_id if parent is not None else None
        above = self._by_child.get(owner) if owner is not None else None
        if above is not None and above.handle.wants_progress:
            self._forward(above.handle, item.nested(handle.id))

    def watch(self, handle: RunHandle) -> None:
        """Turn on progress for ``handle``'s run and every live run below it (a
        subscriber of a run wants the nested runs' items too)."""
        was_on = handle.wants_progress
        handle.want_progress()  # (turning it on tells the run's record: progress_wanted)
        if was_on or not handle.wants_progress:  # (already on, or settled: not told)
            self._watch_handle(handle)

    def _watch_handle(self, handle: RunHandle) -> None:
        child = handle.local_agent
        if child is None:
            return
        for observed in list(self._by_child.values()):
            below = observed.handle
            agent = below.local_agent
            if (
                agent is not None
                and agent.parent_id is not None
                and not below.settled
                and not below.has_sink
                and self._descends_from(agent.parent_id, child.id)
            ):
                below.set_sink(self._route(agent.parent_id))

    def _descends_from(self, agent_id: str | None, ancestor: str) -> bool:
        seen = 0
        while agent_id is not None and seen < _MAX_CHAIN:
            if agent_id == ancestor:
                return True
            upper = self._by_child.get(agent_id)
            agent = upper.handle.local_agent if upper is not None else None
            if agent is None:
                return False
            agent_id = agent.parent_id
            seen += 1
        return False


class _Observed:
    """The tree's record of one published run (the handle's observer): emits the
    run's ``subagent/end``, keeps its usage, releases its slots, forgets it when
    disposed. One object per run instead of closures; the handle drops it once the
    run's dispose has finished."""

    __slots__ = (
        "above",
        "budget",
        "child_id",
        "gates",
        "handle",
        "held",
        "label",
        "parent",
        "parent_id",
        "run_id",
        "started",
        "tree",
    )

    def __init__(
        self,
        tree: RunTree,
        handle: RunHandle,
        run_id: str,
        parent: Agent,
        above: tuple[str, ...],
        label: str | None,
    ) -> None:
        self.tree = tree
        self.handle = handle
        self.run_id = run_id
        self.parent = parent
        """The parent agent (its depth is read only for an event someone listens to)."""
        self.parent_id = above[0]
        self.above = above
        self.label = label
        self.child_id: str | None = None
        self.gates: tuple[Gate, ...] = ()
        """Slots to give back when the run's dispose has finished."""
        self.held: tuple[Gate, ...] = ()
        """Slots the run holds (nested runs borrow them)."""
        self.budget: Budget | None = None
        """The run's budget (None: none)."""
        self.started = 0.0
        """When a budgeted run without a child agent here was published (monotonic
        clock; 0: not timed here, its meter is)."""

    def data(self) -> dict[str, Any]:
        """The data ``subagent/start`` and ``subagent/end`` share."""
        return {
            "run_id": self.run_id,
            "provider": self.handle.provider,
            "parent_agent": self.parent_id,
            "label": self.label,
            "depth": self.parent.depth + 1,
        }

    def settled(self, result: SubagentResult | None, error: BaseException | None) -> None:
        """Record the usage, tell the run above, emit ``subagent/end``."""
        tree = self.tree
        handle = self.handle
        child_id = self.child_id
        by_child = tree._by_child
        run_id = self.run_id
        tree.ledger.record(run_id, self.above, result.usage if result is not None else None)
        stop = result.stop_reason if result is not None else "error"
        upper = by_child.get(self.parent_id)
        if upper is not None and upper.handle.wants_progress:
            tree._forward(upper.handle, SubagentProgress(
                "child_end", (run_id,), run_id=run_id, provider=handle.provider,
                label=handle.label, stop_reason=stop,
            ))  # fmt: skip
        bus = tree._bus
        if not bus.has_listeners(EVENT_END):
            return
        data = self.data()
        data["stop_reason"] = stop
        if result is not None:
            data["diagnostic"] = result.diagnostic
            data["usage"] = result.usage
        else:
            data["diagnostic"] = cap_diagnostic(redact_secrets(f"{type(error).__name__}: {error}"))
        budget = self.budget
        if budget is not None:
            meters = tree.meters
            meter = meters.get(child_id) if meters is not None and child_id is not None else None
            usage = result.usage if result is not None else None
            seconds = time.monotonic() - self.started if self.started else 0.0
            spent = spent_against(budget, meter, usage, seconds)
            data["budget"] = {"caps": budget.to_json(), "spent": spent}
        bus.emit(EVENT_END, data, scope=self.parent_id)

    def progress_wanted(self) -> None:
        """Someone watches the run: the runs below it report their progress too."""
        self.tree._watch_handle(self.handle)

    def disposed(self) -> None:
        """Forget the run; give its slots back."""
        tree = self.tree
        tree._live.pop(self.run_id, None)
        child_id = self.child_id
        if child_id is not None:
            by_child = tree._by_child
            if by_child.get(child_id) is self:
                del by_child[child_id]
        self.held = ()
        gates = self.gates
        if gates:
            self.gates = ()
            tree._release(gates)
