"""Budget meters: what a run and everything below it spent, against its :class:`Budget`.

One :class:`BudgetMeter` per budgeted run (and per root agent given a tree budget with
:meth:`~dsh.subagent.SubagentRuntime.budget_tree`). A meter knows the meter of the run
above it; every charge (a model call's tokens and cost, a delegation started) goes to
the meter and to every meter above it, so spending in a child counts against its
ancestors' budgets. The meters of live runs are kept by agent id in
:class:`BudgetMeters` (the runtime's); a context where no budget was ever set keeps
none, and its starts do no budget work at all.

When a cap is reached the meter *trips*: it records the stop reason and diagnostic and
calls its ``stop`` (the run's cancel: the same path as a cancel, which stops the run's
whole tree). Caps are checked on every usage update (``assistant/message``) and before
the next model call or tool call (``tool/call``, ``tool/result``, ``turn/start``), at
the time limit (a timer), and for ``children`` when a delegation starts.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dsh.subagent._errors import CapacityExceeded, UnsupportedCapability
from dsh.subagent._progress import SubagentUsage
from dsh.subagent._types import Budget

if TYPE_CHECKING:
    from dsh.core import Agent, Context
    from dsh.core.sessions import Event
    from dsh.subagent._provider import SubagentProvider
    from dsh.subagent._types import SubagentStartRequest

__all__ = ["BudgetMeter", "BudgetMeters", "Deadlines", "spent_against"]

_CHECKPOINTS = frozenset(("tool/call", "tool/result", "turn/start"))
"""Events after which the agent calls a tool or the model again: a reached cap stops it."""

Stop = Callable[[str], object]


class BudgetMeter:
    """Spending of one run and the runs below it, against ``budget``.

    ``tokens`` (input + output), ``usd``, ``turns`` (model calls) and ``children``
    (delegations started) count this run's subtree; ``tripped`` is ``(stop_reason,
    diagnostic)`` once a cap was reached (stop reason ``budget``, or ``error`` for a
    ``usd`` cap on a model that reports no cost).
    """

    __slots__ = (
        "_stop",
        "_usd_cap",
        "budget",
        "children",
        "parent",
        "started",
        "tokens",
        "tripped",
        "turns",
        "usd",
    )

    def __init__(self, budget: Budget, parent: BudgetMeter | None, stop: Stop) -> None:
        """A meter below ``parent`` (None: a top one); ``stop(diagnostic)`` stops the
        run. Its time cap is tripped by a :class:`Deadlines` that watches it (the
        owner's: :class:`BudgetMeters` opens meters that way); else only checked."""
        self.budget = budget
        self.parent = parent
        self.started = time.monotonic()
        self._stop = stop
        self.tokens = 0
        self.usd = 0.0
        self.turns = 0
        self.children = 0
        self.tripped: tuple[str, str] | None = None
        self._usd_cap: float | None = budget.usd
        """The ``usd`` cap of this meter or the nearest one above (None: none)."""
        if budget.usd is None and parent is not None:
            self._usd_cap = parent._usd_cap

    @property
    def deadline(self) -> float | None:
        """When the time cap is reached (monotonic clock; None: no time cap)."""
        seconds = self.budget.seconds
        return None if seconds is None else self.started + seconds

    # -- the agent's events ------------------------------------------------------------

    def observe(self, event: Event) -> None:
        """Charge a model call (``assistant/message``); check the caps before the next
        tool or model call. (An :data:`~dsh.core.agents.AgentObserver`.)"""
        kind = event.type
        if kind == "assistant/message":
            self.charge_call(event.data.get("usage"))
        elif kind in _CHECKPOINTS:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Before the next tool or model call: stop the run if a cap is reached. (The
        time cap is left to its timer here: a meter with no parent that is within its
        caps returns without a call.)"""
        if self.parent is None and self.tripped is None:
            budget = self.budget
            if not (
                (budget.tokens is not None and self.tokens >= budget.tokens)
                or (budget.usd is not None and self.usd >= budget.usd)
                or (budget.turns is not None and self.turns >= budget.turns)
            ):
                return
        self.check()

    def charge_call(self, usage: Mapping[str, Any] | None) -> None:
        """Count one model call and its usage (an ``assistant/message``'s ``usage``)
        here and in every meter above: :meth:`charge_usage` of the parsed usage."""
        self.charge_usage(SubagentUsage.from_json(usage) if usage else None)

    def charge_usage(self, call: SubagentUsage | None) -> None:
        """Count one model call and its parsed usage (None: the call reported none)
        here and in every meter above. Under a ``usd`` cap a call with tokens but no
        cost (or no usage at all) stops the run (stop reason ``error``): the cap could
        not be enforced."""
        if call is None:
            tokens = 0
            cost = None
        else:
            tokens = call.input_tokens + call.output_tokens
            cost = call.cost_usd
        meter: BudgetMeter | None = self
        while meter is not None:
            meter.tokens += tokens
            meter.turns += 1
            if cost is not None:
                meter.usd += cost
            meter = meter.parent
        if self._usd_cap is not None and cost is None and (tokens or call is None):
            self.trip(
                "error",
                f"usd budget ${self._usd_cap:.2f} cannot be enforced: the model reported no"
                " cost (cost_usd) for a call; use a model whose adapter prices its calls, or"
                " remove the usd cap",
            )

    def charge(self, tokens: int = 0, usd: float = 0.0, turns: int = 0) -> bool:
        """Count what a child in another process reported spending (tokens, cost,
        model calls) here and in every meter above, then :meth:`check`: True if the
        run must stop."""
        meter: BudgetMeter | None = self
        while meter is not None:
            meter.tokens += tokens
            meter.usd += usd
            meter.turns += turns
            meter = meter.parent
        return self.check()

    def charge_child(self) -> None:
        """Count a delegation started below this meter's run; raises
        ``CAPACITY_EXCEEDED`` (and trips the meter whose ``children`` cap is reached)
        instead when a meter on the way up has no room."""
        meter: BudgetMeter | None = self
        while meter is not None:
            cap = meter.budget.children
            if cap is not None and meter.children >= cap:
                diagnostic = f"children budget {cap} reached: {meter.children} delegations started"
                meter.trip("budget", diagnostic)
                raise CapacityExceeded(
                    f"{diagnostic}; finish with what you have without delegating"
                )
            meter = meter.parent
        meter = self
        while meter is not None:
            meter.children += 1
            meter = meter.parent

    def refund_child(self) -> None:
        """Uncount a delegation :meth:`charge_child` counted whose start failed."""
        meter: BudgetMeter | None = self
        while meter is not None:
            meter.children = max(meter.children - 1, 0)
            meter = meter.parent

    def check(self) -> bool:
        """Trip the first meter (this one, then up) whose cap is reached; True if this
        run must stop."""
        if self.tripped is not None:
            return True
        meter: BudgetMeter | None = self
        while meter is not None:
            if meter.tripped is not None:  # a budget above ran out: this run stops too
                self.trip(*meter.tripped)
                return True
            reached = meter.reached()
            if reached is not None:
                meter.trip("budget", reached)
                return True
            meter = meter.parent
        return False

    def reached(self) -> str | None:
        """The diagnostic of the first cap this meter has reached (None: none)."""
        budget = self.budget
        if budget.tokens is not None and self.tokens >= budget.tokens:
            return f"token budget {budget.tokens} reached: {self.tokens} tokens used"
        if budget.usd is not None and self.usd >= budget.usd:
            return f"usd budget ${budget.usd:.2f} reached: ${self.usd:.4f} spent"
        if budget.turns is not None and self.turns >= budget.turns:
            return f"turn budget {budget.turns} reached: {self.turns} model calls made"
        if budget.seconds is not None:
            elapsed = time.monotonic() - self.started
            if elapsed >= budget.seconds:
                return f"time budget {budget.seconds:g} s reached: {elapsed:.1f} s elapsed"
        return None

    def trip(self, stop_reason: str, diagnostic: str) -> None:
        """Record why the run stops (the first reason wins) and stop it."""
        if self.tripped is not None:
            return
        self.tripped = (stop_reason, diagnostic)
        self._stop(diagnostic)

    def verdict(self) -> tuple[str, str] | None:
        """``(stop_reason, diagnostic)`` of this meter or the nearest tripped one above
        (a run stopped because its ancestor ran out); None if none tripped."""
        meter: BudgetMeter | None = self
        while meter is not None:
            if meter.tripped is not None:
                return meter.tripped
            meter = meter.parent
        return None

    def remaining(self) -> Budget:
        """What is left of every cap here and above (a child's budget is never larger);
        raises ``CAPACITY_EXCEEDED`` when a cap has nothing left."""
        left: dict[str, Any] = {}
        meter: BudgetMeter | None = self
        now = time.monotonic()
        while meter is not None:
            budget = meter.budget
            for name, cap, spent in (
                ("tokens", budget.tokens, meter.tokens),
                ("usd", budget.usd, meter.usd),
                ("turns", budget.turns, meter.turns),
                ("seconds", budget.seconds, now - meter.started),
                ("children", budget.children, meter.children),
            ):
                if cap is None:
                    continue
                rest = cap - spent
                if rest <= 0 and name != "children":
                    raise CapacityExceeded(
                        f"the delegation tree's {name} budget ({cap:g}) is used up; finish"
                        " with what you have without delegating"
                    )
                previous = left.get(name)
                left[name] = rest if previous is None else min(previous, rest)
            meter = meter.parent
        return Budget(**left)

    def spent(self) -> dict[str, Any]:
        """What this meter counted, for reports: ``{"tokens", "usd", "turns",
        "children", "seconds"}``."""
        return {
            "tokens": self.tokens,
            "usd": self.usd,
            "turns": self.turns,
            "children": self.children,
            "seconds": round(time.monotonic() - self.started, 3),
        }

    def release(self) -> None:
        """The run settled: no hold on what ``stop`` would stop."""
        self._stop = _no_stop

    def _time_up(self) -> None:
        budget_seconds = self.budget.seconds
        self.trip(
            "budget",
            f"time budget {budget_seconds:g} s reached:"
            f" {time.monotonic() - self.started:.1f} s elapsed",
        )


def _no_stop(diagnostic: str) -> None:
    return None


def spent_against(
    budget: Budget, meter: BudgetMeter | None, usage: SubagentUsage | None, seconds: float
) -> dict[str, Any]:
    """What a run spent against each cap its budget sets: ``{cap: spent}``. From its
    meter (a run in this process); else from its usage and wall time (a run in another
    process: its model calls and delegations are not known here, and are left out)."""
    if meter is not None:
        spent = meter.spent()
    else:
        spent = {"seconds": round(seconds, 3)}
        if usage is not None:
            spent["tokens"] = usage.input_tokens + usage.output_tokens
            if usage.cost_usd is not None:
                spent["usd"] = usage.cost_usd
    return {name: spent[name] for name in budget.to_json() if name in spent}


class Deadlines:
    """One asyncio timer for the time caps of many meters: the meters of a registry
    (``registered``, by agent id: the runs of this process, which leave it when they
    settle) and a set of others being watched, and a timer for the earliest deadline
    known. A meter that settles first just leaves; the timer is left to fire (runs that
    start one after another with the same cap then share one timer per period instead
    of one each), trips the meters that are due and sets itself for the earliest
    deadline left. Watching and dropping a meter allocate nothing; a firing looks at
    every meter of the registry and the set."""

    __slots__ = ("_at", "_handle", "_registered", "_watched")

    def __init__(self, registered: Mapping[str, BudgetMeter] | None = None) -> None:
        self._registered: Mapping[str, BudgetMeter] = registered if registered is not None else {}
        self._watched: set[BudgetMeter] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._at = math.inf
        """When the timer fires (inf: no timer)."""

    @property
    def watched(self) -> int:
        """How many meters are watched."""
        return len(self._watched)

    def add(self, meter: BudgetMeter) -> None:
        """Watch ``meter``'s time cap (if it has one) until :meth:`discard`: a meter
        that is not in the registry."""
        deadline = meter.deadline
        if deadline is not None:
            self._watched.add(meter)
            self.expect(deadline)

    def expect(self, deadline: float) -> None:
        """A registered meter's time cap is reached at ``deadline`` (monotonic clock):
        the timer fires by then, and finds the meter in the registry while it runs."""
        if deadline < self._at:
            self._schedule(deadline)

    def discard(self, meter: BudgetMeter) -> None:
        """Stop watching ``meter`` (its run settled)."""
        self._watched.discard(meter)

    def _schedule(self, deadline: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._at = deadline
        delay = max(deadline - time.monotonic(), 0.0)
        self._handle = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._at = math.inf
        now = time.monotonic()
        due: list[BudgetMeter] = []
        nearest = math.inf
        for meter in (*self._registered.values(), *self._watched):
            if meter.tripped is not None:
                continue
            deadline = meter.deadline
            if deadline is None:
                continue
            if deadline <= now:
                due.append(meter)
            elif deadline < nearest:
                nearest = deadline
        for meter in due:
            self.discard(meter)  # (a registered one stays in its registry until it settles)
        if nearest < math.inf:
            self._schedule(nearest)
        for meter in due:
            meter._time_up()


class BudgetMeters:
    """The meters of live budgeted runs and budgeted root agents, by agent id."""

    __slots__ = ("by_agent", "context", "deadlines")

    def __init__(self) -> None:
        self.by_agent: dict[str, BudgetMeter] = {}
        """The meters by agent id (empty: no budget anywhere; starts then skip budgets)."""
        self.deadlines = Deadlines(self.by_agent)
        """The one timer of every meter's time cap (it finds the meters of
        :attr:`by_agent` there, and watches the others :meth:`_watched` hands it)."""
        self.context: BudgetMeter | None = None
        """The meter of the context's budget (``Context.open(budget=...)``; None: none)."""

    def open_context(self, ctx: Context, budget: Budget) -> BudgetMeter:
        """Put the whole context under ``budget``: every root agent created from now on
        gets a meter below the context's, so its model calls and everything it
        delegates count; a reached cap cancels every root agent (and so its tree)."""

        def stop(diagnostic: str) -> None:
            for agent in ctx.agents.list():
                if agent.parent_id is None:
                    agent.cancel(diagnostic)

        context = self.context = self._watched(BudgetMeter(budget, None, stop))

        def created(agent: Agent) -> None:
            if agent.parent_id is not None or agent.id in self.by_agent:
                return
            meter = BudgetMeter(Budget(), context, agent.cancel)  # (no time cap of its own)
            self.by_agent[agent.id] = meter
            unobserve = agent.observe(meter.observe, deltas=False)

            async def closed() -> None:
                unobserve()
                self.close(agent.id, meter)

            agent.on_close(closed)

        ctx.agents.on_create(created)
        return context

    def get(self, agent_id: str) -> BudgetMeter | None:
        """The meter of agent ``agent_id`` (None: not metered)."""
        return self.by_agent.get(agent_id)

    def prepare(
        self, name: str, provider: SubagentProvider, request: SubagentStartRequest
    ) -> tuple[SubagentStartRequest, BudgetMeter | None]:
        """The request a provider gets under a budget: its ``budget`` capped by what
        the parent's tree has left, and the delegation counted against ``children``;
        and the meter it was counted in (to :meth:`BudgetMeter.refund_child` if the
        start fails). Unchanged (and None) when the parent's tree has no budget."""
        parent = self.by_agent.get(request.parent.id)
        if parent is None:
            return request, None
        if not provider.capabilities.budget:
            raise UnsupportedCapability(
                f'subagent provider "{name}" does not support the "budget" capability,'
                " and the delegation tree has a budget it could not enforce; delegate with"
                " an in-process provider (spawn, fork) under a budget"
            )
        parent.charge_child()
        try:
            remaining = parent.remaining()
        except BaseException:
            parent.refund_child()
            raise
        from dataclasses import replace  # (only budgeted starts pay)

        budget = (request.budget or Budget()).within(remaining)
        return replace(request, budget=budget), parent

    def open(
        self, agent: Agent, budget: Budget, stop: Stop, above: BudgetMeter | None = None
    ) -> BudgetMeter:
        """A meter for ``agent`` (below its parent's meter, if any, or ``above``)."""
        by_agent = self.by_agent
        parent_id = agent.parent_id
        parent = by_agent.get(parent_id) if parent_id is not None else above
        meter = BudgetMeter(budget, parent, stop)
        by_agent[agent.id] = meter
        seconds = budget.seconds
        if seconds is not None:  # (the timer finds it in by_agent: not watched apart)
            self.deadlines.expect(meter.started + seconds)
        return meter

    def open_remote(self, parent_id: str, budget: Budget, stop: Stop) -> BudgetMeter:
        """A meter for a run in another process started by agent ``parent_id`` (below
        that agent's meter, if any); not kept by agent id (the run has no agent here).
        Close it with :meth:`close_remote`."""
        return self._watched(BudgetMeter(budget, self.by_agent.get(parent_id), stop))

    def close_remote(self, meter: BudgetMeter) -> None:
        """The remote run settled: no timer, no stop."""
        meter.release()
        self.deadlines.discard(meter)

    def close(self, agent_id: str, meter: BudgetMeter) -> None:
        """Forget ``agent_id``'s meter (its run settled): its time cap with it."""
        meter._stop = _no_stop  # (release(), inlined: this runs once per budgeted run)
        by_agent = self.by_agent
        kept = by_agent.pop(agent_id, None)
        if kept is not meter and kept is not None:
            by_agent[agent_id] = kept  # (another meter has the id now: it stays)

    def _watched(self, meter: BudgetMeter) -> BudgetMeter:
        """``meter``, its time cap (if any) watched by :attr:`deadlines` until
        :meth:`close_remote` (a meter not kept in :attr:`by_agent`)."""
        self.deadlines.add(meter)
        return meter
