"""``SubagentRuntime``: the named-provider registry at ``ctx.subagents``."""

from __future__ import annotations

import builtins
import logging
from typing import Any

import anyio

from dsh.core import Agent, Context, Disposer
from dsh.subagent._continuable import ContinuableChildren
from dsh.subagent._continuable_record import ContinuableChild
from dsh.subagent._diagnostics import cap_diagnostic, redact_secrets
from dsh.subagent._errors import (
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
        self._ledger: dict[str, tuple[tuple[str, ...], SubagentUsage]] = {}
        """Settled runs: the agents above the run (parent first), and its usage."""
        self._draining = False
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
        self._ctx.events.emit(EVENT_PROVIDER_ADDED, {"name": name})

        def remove() -> None:
            if self._providers.get(name) is provider:
                del self._providers[name]
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
        run = await provider.start(request)
        self._observe(run, request)
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

    def observe(self, run: SubagentRun, request: SubagentStartRequest) -> None:
        """Emit ``subagent/start`` now and one ``subagent/end`` at settlement; route the
        run's progress (bus and the runs above it). ``start`` does this; a caller that
        started a run through ``provider.start`` directly may call it once."""
        self._observe(run, request)

    def _observe(self, run: SubagentRun, request: SubagentStartRequest) -> None:
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
        bus.emit(EVENT_START, base, scope=parent.id)
        self._live[run.id] = run
        child = run.local_agent
        above_agents = (parent.id, *self._lineage.get(parent.id, ()))
        if child is not None:
            self._by_child[child.id] = handle
            self._lineage[child.id] = above_agents
        above = self._by_child.get(parent.id)
        if above is not None and above._wanted:
            self._forward(above, SubagentProgress(
                "child_start", (run.id,), run_id=run.id, provider=run.provider,
                label=request.label,
            ))  # fmt: skip
        if (above is not None and above._wanted) or bus.has_listeners(EVENT_PROGRESS):
            handle.set_sink(self._route(parent.id))
        if child is not None:
            handle._on_watch = lambda: self.watch_progress(run)

        def on_settle(result: SubagentResult | None, error: BaseException | None) -> None:
            if child is not None and self._by_child.get(child.id) is handle:
                del self._by_child[child.id]
            ledger = self._ledger
            ledger[run.id] = (
                above_agents,
                result.usage if result is not None else SubagentUsage.unknown(),
            )
            if len(ledger) > LEDGER_LIMIT:
                del ledger[next(iter(ledger))]  # bounded: the oldest run goes
            stop = result.stop_reason if result is not None else "error"
            upper = self._by_child.get(parent.id)
            if upper is not None and upper._wanted:
                self._forward(upper, SubagentProgress(
                    "child_end", (run.id,), run_id=run.id, provider=run.provider,
                    label=request.label, stop_reason=stop,
                ))  # fmt: skip
            if not bus.has_listeners(EVENT_END):
                return
            data = dict(base)
            data["stop_reason"] = stop
            if result is not None:
                data["diagnostic"] = result.diagnostic
                data["usage"] = result.usage
            else:
                data["diagnostic"] = cap_diagnostic(
                    redact_secrets(f"{type(error).__name__}: {error}")
                )
            bus.emit(EVENT_END, data, scope=parent.id)

        def on_disposed() -> None:
            self._live.pop(run.id, None)
            if child is not None:
                self._lineage.pop(child.id, None)

        handle.on_settled(on_settle)
        handle.on_disposed(on_disposed)

    # -- usage -----------------------------------------------------------------------

    def usage(self, agent: Agent) -> UsageReport:
        """What the delegations below ``agent`` cost: every settled run started by it
        or by any of its descendants in this process (a remote child's figure already
        includes what its own children cost), and the total."""
        runs = {
            run_id: usage for run_id, (above, usage) in self._ledger.items() if agent.id in above
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
                    {"run_id": handle.run.id, "item": item},
                    scope=parent_id,
                )
            above = self._by_child.get(parent_id)
            if above is not None and above._wanted:
                self._forward(above, item.nested(handle.run.id))

        return sink

    def _forward(self, handle: RunHandle, item: SubagentProgress) -> None:
        """Deliver a nested run's ``item`` (path already relative to ``handle``) to
        ``handle``'s subscribers, and on up the tree."""
        handle.deliver(item)
        parent = handle.run.local_agent
        owner = parent.parent_id if parent is not None else None
        above = self._by_child.get(owner) if owner is not None else None
        if above is not None and above._wanted:
            self._forward(above, item.nested(handle.run.id))

    def watch_progress(self, run: SubagentRun) -> None:
        """Turn on progress for ``run`` and every live run below it (a subscriber of
        ``run`` wants the nested runs' items too)."""
        run._handle.want_progress()
        child = run.local_agent
        if child is None:
            return
        for handle in list(self._by_child.values()):
            agent = handle.run.local_agent
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
            if upper is None or upper.run.local_agent is None:
                return False
            agent_id = upper.run.local_agent.parent_id
            seen += 1
        return False

    async def aclose(self) -> None:
        """Refuse new starts, drain continuable children and dispose every live run
        (the context is closing)."""
        self._draining = True
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
