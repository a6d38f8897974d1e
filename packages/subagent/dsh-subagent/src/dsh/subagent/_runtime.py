"""``SubagentRuntime``: the named-provider registry at ``ctx.subagents``."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Mapping
from typing import Any

import anyio

from dsh.core import Agent, Context, Disposer
from dsh.subagent._admission import Admission, Gate, QueuedHandle, has_room
from dsh.subagent._continuable import ContinuableChildren
from dsh.subagent._continuable_record import ContinuableChild
from dsh.subagent._diagnostics import cap_diagnostic, redact_secrets
from dsh.subagent._errors import (
    CapacityExceeded,
    DepthExceeded,
    Draining,
    DuplicateProvider,
    ProviderNotFound,
    StartAborted,
    UnsupportedCapability,
)
from dsh.subagent._progress import SubagentProgress, SubagentUsage, UsageReport
from dsh.subagent._provider import SubagentProvider
from dsh.subagent._run import RunHandle, SubagentRun
from dsh.subagent._types import SubagentResult, SubagentStartRequest
from dsh.subagent._validation import check_max_depth, check_output_schema, depth_violation

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
EVENT_START = "subagent/start"
EVENT_END = "subagent/end"
EVENT_PROGRESS = "subagent/progress"
LEDGER_LIMIT = 100_000
"""Settled runs the usage ledger keeps (the oldest go first)."""
DESCENDANTS_META = "max_descendants"
"""Session-header meta key of a root agent's descendants budget (set from the
:class:`~dsh.subagent.kit.Lineage` of a child process's parent)."""
_ROOTS_LIMIT = 10_000
"""Root agents whose descendants the runtime keeps counting (the oldest go first)."""
UNLIMITED = "unlimited"


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
        self._live: dict[str, SubagentRun] = {}
        self._by_child: dict[str, RunHandle] = {}
        """Runs whose child is an agent of this context, by that agent's id."""
        self._lineage: dict[str, tuple[str, ...]] = {}
        """Agent ids above each child agent of this context (parent first)."""
        self._ledger: dict[str, tuple[tuple[str, ...], _UsageRow]] = {}
        """Settled runs: the agents above the run (parent first), and its usage as a
        tuple of plain values (so the collector stops tracking the entry: a long-lived
        process keeps up to LEDGER_LIMIT of them)."""
        self._draining = False
        self._admission = Admission(self)
        self._caps: dict[str, int | None] = {}
        """Configured caps by provider name (None: no cap), over the providers' own."""
        self._gates: dict[str, tuple[Gate, ...]] = {}
        """The gates of each provider's runs (empty: no cap), computed on first use."""
        self._max_descendants: int | None = None
        self._descendants: dict[str, int] = {}
        """Runs started so far below each root agent (its descendants, all depths)."""
        self.continuable = ContinuableChildren(ctx, self)
        """The registry of continuable children (send_message, interrupt, list, report)."""

    @property
    def draining(self) -> bool:
        """True once the context is closing (new starts raise ``DRAINING``)."""
        return self._draining

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
        return list(self._live.values())

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
        previous = (self._admission.context_limit, dict(self._caps), self._max_descendants)
        self._apply_caps(max_running, dict(providers or {}), max_descendants)

        def restore() -> None:
            self._apply_caps(*previous)

        return restore

    def _apply_caps(
        self, max_running: int | None, caps: dict[str, int | None], max_descendants: int | None
    ) -> None:
        self._caps = caps
        self._max_descendants = max_descendants
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

    def _unborrowed(self, gates: tuple[Gate, ...], agent: Agent) -> tuple[Gate, ...]:
        """``gates`` minus those a run above ``agent`` holds a slot in: a nested run
        borrows its ancestors' slots, so a run waiting for its own children can never
        hold the slot they wait for (no deadlock from nesting within one cap)."""
        held: set[Gate] = set()
        by_child = self._by_child
        agent_id: str | None = agent.id
        for _ in range(256):
            handle = by_child.get(agent_id) if agent_id is not None else None
            if handle is None:
                break
            observed = handle._observer
            if isinstance(observed, _Observed):
                held.update(observed.held)
            child = handle._local_agent
            agent_id = child.parent_id if child is not None else None
        if not held:
            return gates
        return tuple(gate for gate in gates if gate not in held)

    def _gates_of(self, name: str, request: SubagentStartRequest) -> tuple[Gate, ...]:
        gates = self._gates_for(name)
        if gates and request.parent.parent_id is not None:
            gates = self._unborrowed(gates, request.parent)
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
        ``depth_limit``, ``tool_filter``, ``persona``); validate ``max_depth``,
        ``output_schema`` and the depth; ``provider.start``; then emit
        ``subagent/start`` and, when the result settles, one ``subagent/end``.
        A start that raises emits nothing and leaves nothing running.
        """
        provider = self.check_start(name, request)
        gates = self._gates.get(name)
        if gates is None:
            gates = self._gates_for(name)
        if gates and request.parent.parent_id is not None:
            gates = self._unborrowed(gates, request.parent)
        root = self._take_descendant(request)
        if gates:
            if not has_room(gates):
                return self._enqueue(provider, request, gates, root)
            Admission.take(gates)
        try:
            run = await provider.start(request)
        except BaseException:
            if gates:
                self._admission.release(gates)
            self._refund_descendant(root)
            raise
        self._observe(run, request, gates)
        return run

    def _enqueue(
        self,
        provider: SubagentProvider,
        request: SubagentStartRequest,
        gates: tuple[Gate, ...],
        root: str | None,
    ) -> SubagentRun:
        """Publish a run that waits for a slot (state ``queued``)."""
        handle = QueuedHandle(self._admission, provider, request, gates)
        handle.root = root
        run = handle.run
        self._admission.enqueue(handle)
        self._observe(run, request, queued=True)  # (a sink gets the queued item at once)
        return run

    async def start_continuable(self, name: str, request: SubagentStartRequest) -> ContinuableChild:
        """Start a continuable child on provider ``name`` (one with
        ``prepare_continuable``); returns once it accepted its first message.
        See :class:`~dsh.subagent.ContinuableChildren`."""
        return await self.continuable.start(name, request)

    def check_start(self, name: str, request: SubagentStartRequest) -> SubagentProvider:
        """The gate every start passes, in order: the provider, its capabilities,
        ``max_depth`` / ``output_schema`` / depth, draining, the signal.

        The depth limit a parent inherited binds only providers with the
        ``depth_limit`` capability (the others manage depth themselves)."""
        provider = self._providers.get(name)
        if provider is None:
            raise ProviderNotFound(f'no subagent provider registered for "{name}"')
        capabilities = provider.capabilities
        missing = capabilities.missing_for(request)
        if missing is not None:
            raise UnsupportedCapability(
                f'subagent provider "{name}" does not support the "{missing}" capability'
            )
        if request.max_depth is not None:
            check_max_depth(request.max_depth)
        if request.output_schema is not None:
            check_output_schema(request.output_schema)
        if capabilities.depth_limit:
            violation = depth_violation(request.parent.session.header.meta, request.max_depth)
            if violation is not None:
                raise DepthExceeded(violation)
        if self._draining:
            raise Draining("the subagent runtime is shutting down")
        if request.signal.aborted:
            raise StartAborted(f"subagent start aborted: {request.signal.reason}")
        return provider

    # -- descendants budget --------------------------------------------------------------

    def _root_of(self, agent: Agent) -> Agent:
        """The topmost live agent above ``agent`` (itself for a root agent)."""
        agents = self._ctx.agents
        root = agent
        for _ in range(256):
            parent_id = root.parent_id
            if parent_id is None:
                break
            upper = agents.get(parent_id)
            if upper is None:
                break
            root = upper
        return root

    def _descendants_cap(self, root: Agent) -> int | None:
        cap = self._max_descendants
        inherited = root.session.header.meta.get(DESCENDANTS_META)
        if isinstance(inherited, int) and not isinstance(inherited, bool) and inherited >= 0:
            cap = inherited if cap is None else min(cap, inherited)
        return cap

    def descendants(self, agent: Agent) -> tuple[int, int | None]:
        """Runs started so far in ``agent``'s delegation tree (below its root agent, in
        this process), and the tree's ``max_descendants`` (None: no cap)."""
        root = self._root_of(agent)
        return self._descendants.get(root.id, 0), self._descendants_cap(root)

    def descendants_budget(self, agent: Agent) -> int | None:
        """How many more runs ``agent``'s tree may start (None: no cap); what a child
        in another process inherits as its own ``max_descendants``."""
        count, cap = self.descendants(agent)
        return None if cap is None else max(cap - count, 0)

    def _take_descendant(self, request: SubagentStartRequest) -> str | None:
        """Count one more descendant of the request's root agent; raises
        ``CAPACITY_EXCEEDED`` when the tree is at its cap. Returns what to refund."""
        root = self._root_of(request.parent)
        cap = self._descendants_cap(root)
        if cap is None:
            return None
        counts = self._descendants
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

    def _refund_descendant(self, root: str | None) -> None:
        """Uncount a run that never started (its start raised or failed)."""
        if root is not None and self._descendants.get(root, 0) > 0:
            self._descendants[root] -= 1

    def observe(self, run: SubagentRun, request: SubagentStartRequest) -> None:
        """Emit ``subagent/start`` now and one ``subagent/end`` at settlement; route the
        run's progress (bus and the runs above it). ``start`` does this; a caller that
        started a run through ``provider.start`` directly may call it once."""
        self._observe(run, request)

    def _observe(
        self,
        run: SubagentRun,
        request: SubagentStartRequest,
        gates: tuple[Gate, ...] = (),
        *,
        queued: bool = False,
    ) -> _Observed:
        parent = request.parent
        bus = self._ctx.events
        handle = run._handle
        base: dict[str, Any] = {
            "run_id": run.id,
            "provider": run.provider,
            "parent_agent": parent.id,
            "label": request.label,
            "depth": parent.depth + 1,
        }
        bus.emit(EVENT_START, {**base, "state": "queued"} if queued else base, scope=parent.id)
        self._live[run.id] = run
        above_agents = (parent.id, *self._lineage.get(parent.id, ()))
        observed = handle._observer = _Observed(self, handle, parent.id, above_agents, base)
        observed.gates = observed.held = gates
        child = handle._local_agent
        if child is not None:
            self._attach_child(observed, handle, child)
        above = self._by_child.get(parent.id)
        if above is not None and above._wanted:
            self._forward(above, SubagentProgress(
                "child_start", (run.id,), run_id=run.id, provider=run.provider,
                label=request.label,
            ))  # fmt: skip
        if (above is not None and above._wanted) or bus.has_listeners(EVENT_PROGRESS):
            handle.set_sink(self._route(parent.id))
        if child is not None and not handle._wanted:
            handle._on_watch = self._watch_handle
        if handle._settled:  # (a provider may settle before it returns the run)
            observed.settled(handle._result, handle._error)
        if handle._disposed:
            handle._observer = None
            observed.disposed()
        return observed

    def _attach_child(self, observed: _Observed, handle: RunHandle, child: Agent) -> None:
        observed.child_id = child.id
        self._by_child[child.id] = handle
        self._lineage[child.id] = observed.above

    def _attach_inner(self, outer: RunHandle, inner: RunHandle) -> None:
        """A queued run started: its inner run's child agent is the outer run's."""
        child = inner._local_agent
        observed = outer._observer
        if child is None or not isinstance(observed, _Observed):
            return
        outer._local_agent = child
        if isinstance(outer, QueuedHandle):
            observed.held = outer.gates  # (the inner run releases them when disposed)
        self._attach_child(observed, outer, child)
        if not outer._wanted:
            outer._on_watch = self._watch_handle

    # -- usage -----------------------------------------------------------------------

    def usage(self, agent: Agent) -> UsageReport:
        """What the delegations below ``agent`` cost: every settled run started by it
        or by any of its descendants in this process (a remote child's figure already
        includes what its own children cost), and the total."""
        runs = {
            run_id: _usage_of(row)
            for run_id, (above, row) in self._ledger.items()
            if agent.id in above
        }
        total = SubagentUsage()
        for usage in runs.values():
            total = total + usage
        return UsageReport(total, runs)

    # -- progress routing ----------------------------------------------------------

    def _route(self, parent_id: str) -> Any:
        bus = self._ctx.events

        def sink(handle: RunHandle, item: SubagentProgress) -> None:
            if bus.has_listeners(EVENT_PROGRESS):
                bus.emit(
                    EVENT_PROGRESS,
                    {"run_id": handle._id, "item": item},
                    scope=parent_id,
                )
            above = self._by_child.get(parent_id)
            if above is not None and above._wanted:
                self._forward(above, item.nested(handle._id))

        return sink

    def _forward(self, handle: RunHandle, item: SubagentProgress) -> None:
        """Deliver a nested run's ``item`` (path already relative to ``handle``) to
        ``handle``'s subscribers, and on up the tree."""
        handle.deliver(item)
        parent = handle._local_agent
        owner = parent.parent_id if parent is not None else None
        above = self._by_child.get(owner) if owner is not None else None
        if above is not None and above._wanted:
            self._forward(above, item.nested(handle._id))

    def watch_progress(self, run: SubagentRun) -> None:
        """Turn on progress for ``run`` and every live run below it (a subscriber of
        ``run`` wants the nested runs' items too)."""
        run._handle.want_progress()
        self._watch_handle(run._handle)

    def _watch_handle(self, handle: RunHandle) -> None:
        child = handle._local_agent
        if child is None:
            return
        for handle in list(self._by_child.values()):
            agent = handle._local_agent
            if (
                agent is not None
                and agent.parent_id is not None
                and handle._sink is None
                and self._descends_from(agent.parent_id, child.id)
            ):
                handle.set_sink(self._route(agent.parent_id))

    def _descends_from(self, agent_id: str | None, ancestor: str) -> bool:
        seen = 0
        while agent_id is not None and seen < 256:
            if agent_id == ancestor:
                return True
            upper = self._by_child.get(agent_id)
            if upper is None or upper._local_agent is None:
                return False
            agent_id = upper._local_agent.parent_id
            seen += 1
        return False

    async def aclose(self) -> None:
        """Refuse new starts, drain continuable children and dispose every live run
        (the context is closing)."""
        self._draining = True
        for handle in list(self._admission.queue):
            handle._finish_queued("the subagent runtime is shutting down")
        await self.continuable.aclose()
        runs = list(self._live.values())
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


class _Observed:
    """The runtime's record of one published run (the handle's observer): emits the
    run's ``subagent/end``, keeps its usage, releases its slots, forgets it when
    disposed. One object per run instead of closures; the handle drops it once the
    run's dispose has finished."""

    __slots__ = ("above", "base", "child_id", "gates", "handle", "held", "parent_id", "runtime")

    def __init__(
        self,
        runtime: SubagentRuntime,
        handle: RunHandle,
        parent_id: str,
        above: tuple[str, ...],
        base: dict[str, Any],
    ) -> None:
        self.runtime = runtime
        self.handle = handle
        self.parent_id = parent_id
        self.above = above
        self.base = base
        self.child_id: str | None = None
        self.gates: tuple[Gate, ...] = ()
        """Slots to give back when the run's dispose has finished."""
        self.held: tuple[Gate, ...] = ()
        """Slots the run holds (nested runs borrow them)."""

    def settled(self, result: SubagentResult | None, error: BaseException | None) -> None:
        runtime = self.runtime
        handle = self.handle
        child_id = self.child_id
        if child_id is not None and runtime._by_child.get(child_id) is handle:
            del runtime._by_child[child_id]
        ledger = runtime._ledger
        ledger[handle._id] = (self.above, _row_of(result.usage if result is not None else None))
        if len(ledger) > LEDGER_LIMIT:
            del ledger[next(iter(ledger))]  # bounded: the oldest run goes
        stop = result.stop_reason if result is not None else "error"
        upper = runtime._by_child.get(self.parent_id)
        if upper is not None and upper._wanted:
            runtime._forward(upper, SubagentProgress(
                "child_end", (handle._id,), run_id=handle._id, provider=handle._provider,
                label=handle._label, stop_reason=stop,
            ))  # fmt: skip
        bus = runtime._ctx.events
        if not bus.has_listeners(EVENT_END):
            return
        data = dict(self.base)
        data["stop_reason"] = stop
        if result is not None:
            data["diagnostic"] = result.diagnostic
            data["usage"] = result.usage
        else:
            data["diagnostic"] = cap_diagnostic(redact_secrets(f"{type(error).__name__}: {error}"))
        bus.emit(EVENT_END, data, scope=self.parent_id)

    def disposed(self) -> None:
        runtime = self.runtime
        runtime._live.pop(self.handle._id, None)
        if self.child_id is not None:
            runtime._lineage.pop(self.child_id, None)
        self.held = ()
        gates = self.gates
        if gates:
            self.gates = ()
            runtime._admission.release(gates)


_UsageRow = tuple[int, int, int | None, int | None, float | None, bool] | None
"""A :class:`SubagentUsage` as plain values (None: unknown)."""


def _row_of(usage: SubagentUsage | None) -> _UsageRow:
    if usage is None or usage is _UNKNOWN_USAGE:
        return None
    return (
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_input_tokens,
        usage.reasoning_tokens,
        usage.cost_usd,
        usage.incomplete,
    )


def _usage_of(row: _UsageRow) -> SubagentUsage:
    return _UNKNOWN_USAGE if row is None else SubagentUsage(*row)


_UNKNOWN_USAGE = SubagentUsage.unknown()
