"""``SubagentRuntime``: the named-provider registry at ``ctx.subagents``.

The runtime is the front of the engine: it passes a start through the gate
(:meth:`SubagentRuntime.check_start`), the descendants budget
(:class:`~dsh.subagent._budget.DescendantsBudget`) and admission control
(:class:`~dsh.subagent._admission.Admission`, skipped entirely while no cap is
set), then publishes the run in its :class:`~dsh.subagent._tree.RunTree` (events,
nesting, progress routing, usage). Each of those knows the runtime only through
the callables it is given.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import anyio

from dsh.core import Context
from dsh.core.lifecycle import Disposer
from dsh.subagent._admission import Admission, Gate, QueuedHandle, has_room
from dsh.subagent._budget import DESCENDANTS_META, DescendantsBudget
from dsh.subagent._continuable import ContinuableChildren
from dsh.subagent._continuable_record import ContinuableChild
from dsh.subagent._errors import (
    DepthExceeded,
    Draining,
    DuplicateProvider,
    InvalidRequest,
    ProviderNotFound,
    StartAborted,
    UnsupportedCapability,
)
from dsh.subagent._installed import unregistered_provider_fix
from dsh.subagent._meter import BudgetMeter, BudgetMeters
from dsh.subagent._progress import UsageReport
from dsh.subagent._provider import SubagentProvider
from dsh.subagent._run import RunHandle, SubagentRun, handle_of
from dsh.subagent._tree import EVENT_END, EVENT_PROGRESS, EVENT_START, RunTree
from dsh.subagent._types import ALL_START_CAPABILITIES, Budget, SubagentStartRequest
from dsh.subagent._validation import (
    check_budget,
    check_max_depth,
    check_output_schema,
    depth_violation,
)

if TYPE_CHECKING:
    from dsh.core import Agent

__all__ = [
    "DESCENDANTS_META",
    "EVENT_END",
    "EVENT_PROGRESS",
    "EVENT_PROVIDER_ADDED",
    "EVENT_PROVIDER_REMOVED",
    "EVENT_START",
    "SERVICE_NAME",
    "SubagentRuntime",
    "install",
]

_log = logging.getLogger("dsh.subagent")

SERVICE_NAME = "subagents"
EVENT_PROVIDER_ADDED = "subagent/provider-added"
EVENT_PROVIDER_REMOVED = "subagent/provider-removed"


class SubagentRuntime:
    """Registry of subagent providers; starts runs through the capability gate.

    One per context, at ``ctx.subagents`` (installed on first use whenever
    dsh-subagent is installed; :meth:`of` is the typed accessor). Events go on
    ``ctx.events``: ``subagent/provider-added`` / ``-removed`` (data ``{"name"}``),
    and per run ``subagent/start``, ``subagent/progress`` items, then exactly one
    ``subagent/end``, scoped to the parent agent's id. Continuable children live in
    :attr:`continuable`.
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._providers: dict[str, SubagentProvider] = {}
        self._draining = False
        self._admission = Admission(
            gates_of=self._gates_of,
            spawn=ctx.spawn,
            draining=self._is_draining,
            refund=self._refund,
            started=self._started,
        )
        self._budget = DescendantsBudget(ctx)
        self.meters = BudgetMeters()
        """Budget meters of live budgeted runs and root agents (empty: no budget set)."""
        self._tree = RunTree(ctx.events, self._admission.release, self.meters)
        tree_budget = getattr(ctx, "tree_budget", None)
        if tree_budget is not None:  # Context.open(budget=...)
            check_budget(tree_budget)
            self.meters.open_context(ctx, tree_budget)
        self._caps: dict[str, int | None] = {}
        """Configured caps by provider name (None: no cap), over the providers' own."""
        self._gates: dict[str, tuple[Gate, ...]] = {}
        """The gates of each provider's runs (empty: no cap), computed on first use."""
        self.continuable = ContinuableChildren(
            ctx,
            check_start=self.check_start,
            get_provider=self.get_provider,
            budget=self._budget,
            draining=self._is_draining,
        )
        """The registry of continuable children (send_message, interrupt, list, report)."""

    @property
    def draining(self) -> bool:
        """True once the context is closing (new starts raise ``DRAINING``)."""
        return self._draining

    def _is_draining(self) -> bool:
        return self._draining

    def _refund(self, root: str | None) -> None:
        self._budget.refund(root)

    @classmethod
    def of(cls, ctx: Context) -> SubagentRuntime:
        """The context's runtime (installed on first use for the context's lifetime)."""
        return ctx.ensure_service(SERVICE_NAME, SubagentRuntime, _create)

    # -- providers ----------------------------------------------------------------

    def register_provider(self, provider: SubagentProvider) -> Disposer:
        """Add ``provider`` under its name; the disposer removes it.

        Runs already started stay alive when their provider is removed.
        """
        name = provider.name
        if name in self._providers:
            raise DuplicateProvider(f'a subagent provider named "{name}" is already registered')
        self._providers[name] = provider
        self._gates.pop(name, None)
        self._ctx.events.emit(EVENT_PROVIDER_ADDED, {"name": name})

        def remove() -> None:
            if self._providers.get(name) is provider:
                del self._providers[name]
                self._gates.pop(name, None)
                self._ctx.events.emit(EVENT_PROVIDER_REMOVED, {"name": name})

        return remove

    def get_provider(self, name: str) -> SubagentProvider | None:
        """The provider called ``name``, or None."""
        return self._providers.get(name)

    def list(self) -> list[str]:
        """Provider names in registration order."""
        return list(self._providers)

    def live_runs(self) -> builtins.list[SubagentRun]:
        """Runs started through this runtime and not yet disposed."""
        return self._tree.live_runs()

    # -- capacity ------------------------------------------------------------------

    def configure(
        self,
        *,
        max_running: int | None = None,
        providers: Mapping[str, int | None] | None = None,
        max_descendants: int | None = None,
    ) -> Disposer:
        """Set the caps (the ``dsh-subagent`` plugin's config); the disposer restores
        the previous ones.

        ``max_running``: running children of all providers together (None: no cap).
        ``providers``: a cap per provider name over the provider's own default
        (``max_running`` attribute); None there lifts the cap. ``max_descendants``:
        runs started below one root agent, all depths together (None: no cap).
        Runs already holding slots keep them; queued runs are admitted at once if
        the new caps leave room.
        """
        for value in (max_running, max_descendants, *(providers or {}).values()):
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ValueError(f"a cap must be a positive integer or None, got {value!r}")
        previous = (self._admission.context_limit, dict(self._caps), self._budget.cap)
        self._apply_caps(max_running, dict(providers or {}), max_descendants)

        def restore() -> None:
            self._apply_caps(*previous)

        return restore

    def _apply_caps(
        self, max_running: int | None, caps: dict[str, int | None], max_descendants: int | None
    ) -> None:
        self._caps = caps
        self._budget.cap = max_descendants
        self._gates.clear()
        self._admission.configure(max_running)

    def cap_of(self, name: str) -> int | None:
        """The cap on running children of provider ``name`` (None: no cap): the
        configured one, else the provider's own ``max_running``."""
        if name in self._caps:
            return self._caps[name]
        provider = self._providers.get(name)
        declared = getattr(provider, "max_running", None)
        return declared if isinstance(declared, int) and declared > 0 else None

    def running(self, name: str | None = None) -> int:
        """Runs holding a slot (admitted and not yet disposed): of provider ``name``,
        or of all providers. Counts only capped providers (uncapped runs hold no slot)
        unless ``max_running`` is set."""
        return self._admission.running(name)

    def queued(self) -> builtins.list[SubagentRun]:
        """Runs waiting for a slot, oldest first."""
        return [handle.run for handle in self._admission.queue]

    def _gates_of(self, name: str, request: SubagentStartRequest) -> tuple[Gate, ...]:
        gates = self._gates_for(name)
        if gates and request.parent.parent_id is not None:
            gates = self._tree.unborrowed(gates, request.parent)
        return gates

    def _gates_for(self, name: str) -> tuple[Gate, ...]:
        gates = self._gates.get(name)
        if gates is None:
            gates = self._gates[name] = self._admission.gates_for(name, self.cap_of(name))
        return gates

    # -- runs ---------------------------------------------------------------------

    async def start(self, name: str, request: SubagentStartRequest) -> SubagentRun:
        """Start a run on provider ``name``.

        In order: look up the provider; the capability gate (``output_schema``,
        ``depth_limit``, ``tool_filter``, ``persona``, ``budget``); validate
        ``max_depth``, ``output_schema``, ``budget`` and the depth; under a budget,
        cap the request's budget by what the parent's tree has left and count the
        delegation (``CAPACITY_EXCEEDED`` past a ``children`` cap); ``provider.start``; then emit
        ``subagent/start`` and, when the result settles, one ``subagent/end``.
        A start that raises emits nothing and leaves nothing running.
        """
        provider = self.check_start(name, request)
        charged: BudgetMeter | None = None
        if self.meters.by_agent:  # (no metered agent, so no parent's tree under a budget)
            request, charged = self.meters.prepare(name, provider, request)
        gates = self._gates.get(name)
        if gates is None:
            gates = self._gates_for(name)
        if gates and request.parent.parent_id is not None:
            gates = self._tree.unborrowed(gates, request.parent)
        root = self._budget.take(request.parent)
        if gates:
            if not has_room(gates):
                return self._enqueue(provider, request, gates, root, charged)
            Admission.take(gates)
        try:
            run = await provider.start(request)
        except BaseException:
            if gates:
                self._admission.release(gates)
            self._budget.refund(root)
            if charged is not None:  # the children count goes back: nothing started
                charged.refund_child()
            raise
        self._tree.observe(run, request, gates)
        return run

    def _enqueue(
        self,
        provider: SubagentProvider,
        request: SubagentStartRequest,
        gates: tuple[Gate, ...],
        root: str | None,
        charged: BudgetMeter | None = None,
    ) -> SubagentRun:
        """Publish a run that waits for a slot (state ``queued``)."""
        handle = QueuedHandle(self._admission, provider, request, gates)
        handle.root = root
        handle.charged = charged
        run = handle.run
        self._admission.enqueue(handle)
        self._tree.observe(run, request, queued=True)  # (a sink gets the queued item at once)
        return run

    def _started(self, outer: RunHandle, inner: RunHandle, gates: tuple[Gate, ...]) -> None:
        self._tree.started(outer, inner, gates)

    async def start_continuable(self, name: str, request: SubagentStartRequest) -> ContinuableChild:
        """Start a continuable child on provider ``name`` (one with
        ``prepare_continuable``); returns once it accepted its first message.
        See :class:`~dsh.subagent.ContinuableChildren`. Continuable children take no
        budget yet: one under a budgeted tree is refused (``INVALID_REQUEST``)."""
        if self.meters.by_agent and self.meters.get(request.parent.id) is not None:
            raise InvalidRequest(
                "continuable children do not take a budget yet, and this agent's delegation"
                " tree has one; delegate with a one-shot child instead"
            )
        return await self.continuable.start(name, request)

    def check_start(self, name: str, request: SubagentStartRequest) -> SubagentProvider:
        """The gate every start passes, in order: the provider, its capabilities,
        ``max_depth`` / ``output_schema`` / depth, draining, the signal.

        The depth limit a parent inherited binds only providers with the
        ``depth_limit`` capability (the others manage depth themselves)."""
        provider = self._providers.get(name)
        if provider is None:
            fix = unregistered_provider_fix(name, self._providers)
            raise ProviderNotFound(f'no subagent provider registered for "{name}": {fix}')
        capabilities = provider.capabilities
        if capabilities is not ALL_START_CAPABILITIES:  # (with every one, none is missing)
            missing = capabilities.missing_for(request)
            if missing is not None:
                raise UnsupportedCapability(
                    f'subagent provider "{name}" does not support the "{missing}" capability'
                )
        max_depth = request.max_depth
        if max_depth is not None and (type(max_depth) is not int or max_depth < 0):
            check_max_depth(max_depth)  # (raises; the check itself is inlined above)
        if request.output_schema is not None:
            check_output_schema(request.output_schema)
        budget = request.budget
        if budget is not None and type(budget) is not Budget:
            check_budget(budget)  # (raises; a Budget checked its caps when built)
        if capabilities.depth_limit:
            violation = depth_violation(request.parent.session.header.meta, max_depth)
            if violation is not None:
                raise DepthExceeded(violation)
        if self._draining:
            raise Draining("the subagent runtime is shutting down")
        if request.signal.aborted:
            raise StartAborted(f"subagent start aborted: {request.signal.reason}")
        return provider

    # -- descendants budget --------------------------------------------------------------

    def descendants(self, agent: Agent) -> tuple[int, int | None]:
        """Runs started so far in ``agent``'s delegation tree (below its root agent, in
        this process), and the tree's ``max_descendants`` (None: no cap)."""
        return self._budget.count(agent)

    def descendants_budget(self, agent: Agent) -> int | None:
        """How many more runs ``agent``'s tree may start (None: no cap); what a child
        in another process inherits as its own ``max_descendants``."""
        count, cap = self._budget.count(agent)
        return None if cap is None else max(cap - count, 0)

    def observe(self, run: SubagentRun, request: SubagentStartRequest) -> None:
        """Emit ``subagent/start`` now and one ``subagent/end`` at settlement; route the
        run's progress (bus and the runs above it). ``start`` does this; a caller that
        started a run through ``provider.start`` directly may call it once."""
        self._tree.observe(run, request)

    # -- budgets -----------------------------------------------------------------------

    def budget_tree(self, agent: Agent, budget: Budget) -> Disposer:
        """Put ``agent`` and everything delegated below it under ``budget``: the agent's
        own model calls and every run below it count; a reached cap cancels the agent
        (its turn ends ``aborted`` with the cap in the error; :meth:`budget_verdict`
        says which) and so its whole tree. The disposer lifts the budget."""
        check_budget(budget)
        above = self.meters.get(agent.id)
        if above is not None and above.parent is not self.meters.context:
            raise ValueError(f"agent {agent.id} already has a budget")
        if budget.usd is not None and getattr(agent.model.adapter, "reports_cost", None) is False:
            raise InvalidRequest(
                f"a usd budget (${budget.usd:.2f}) cannot be enforced: the agent's model adapter"
                f" ({type(agent.model.adapter).__name__}) reports no cost; remove the usd cap"
                " or use a priced model"
            )
        meter = self.meters.open(agent, budget, agent.cancel, above)
        unobserve = agent.observe(meter.observe, deltas=False)

        def lift() -> None:
            unobserve()
            self.meters.close(agent.id, meter)
            if above is not None and not above.tripped:  # (back under the context's budget)
                self.meters.by_agent.setdefault(agent.id, above)

        return lift

    def budget_meter(self, agent: Agent) -> BudgetMeter | None:
        """The meter of ``agent``'s budget (a budgeted run's child agent, or a root agent
        given :meth:`budget_tree`); None when it has none."""
        return self.meters.get(agent.id)

    # -- usage -----------------------------------------------------------------------

    def usage(self, agent: Agent) -> UsageReport:
        """What the delegations below ``agent`` cost: every settled run started by it
        or by any of its descendants in this process (a remote child's figure already
        includes what its own children cost), and the total."""
        return self._tree.ledger.report(agent.id)

    def watch_progress(self, run: SubagentRun) -> None:
        """Turn on progress for ``run`` and every live run below it (a subscriber of
        ``run`` wants the nested runs' items too)."""
        self._tree.watch(handle_of(run))

    async def aclose(self) -> None:
        """Refuse new starts, drain continuable children and dispose every live run
        (the context is closing)."""
        self._draining = True
        self._admission.abandon("the subagent runtime is shutting down")
        await self.continuable.aclose()
        runs = self._tree.live_runs()
        if not runs:
            return
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for run in runs:
                    tg.start_soon(_dispose_quietly, run)


def _create(ctx: Context) -> SubagentRuntime:
    runtime = SubagentRuntime(ctx)
    ctx.on_close(runtime.aclose)
    return runtime


def install(ctx: Context) -> SubagentRuntime:
    """The ``dsh.services`` entry point: ``ctx.subagents`` on first access."""
    return SubagentRuntime.of(ctx)


async def _dispose_quietly(run: SubagentRun) -> None:
    try:
        await run.dispose()
    except Exception:
        _log.exception("disposing run %s at shutdown failed", run.id)
