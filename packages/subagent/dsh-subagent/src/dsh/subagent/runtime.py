"""``SubagentRuntime``: the named-provider registry at ``ctx.subagents``."""

from __future__ import annotations

import builtins
import logging
from typing import Any

import anyio

from dsh.core import Context, Disposer
from dsh.subagent.continuable import ContinuableChildren
from dsh.subagent.continuable_record import ContinuableChild
from dsh.subagent.errors import SubagentError
from dsh.subagent.provider import SubagentProvider
from dsh.subagent.run import SubagentRun
from dsh.subagent.types import SubagentResult, SubagentStartRequest
from dsh.subagent.validation import check_max_depth, check_output_schema, depth_violation

__all__ = [
    "EVENT_END",
    "EVENT_PROVIDER_ADDED",
    "EVENT_PROVIDER_REMOVED",
    "EVENT_START",
    "SERVICE_NAME",
    "SubagentRuntime",
]

_log = logging.getLogger("dsh.subagent")

SERVICE_NAME = "subagents"
EVENT_PROVIDER_ADDED = "subagent/provider-added"
EVENT_PROVIDER_REMOVED = "subagent/provider-removed"
EVENT_START = "subagent/start"
EVENT_END = "subagent/end"


class SubagentRuntime:
    """Registry of subagent providers; starts runs through the capability gate.

    Get the one of a context with :meth:`of`. Events go on ``ctx.events``:
    ``subagent/provider-added`` / ``-removed`` (data ``{"name"}``), and per run
    ``subagent/start`` then exactly one ``subagent/end``, scoped to the parent
    agent's id. Continuable children live in :attr:`continuable`.
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._providers: dict[str, SubagentProvider] = {}
        self._live: dict[str, SubagentRun] = {}
        self._draining = False
        self.continuable = ContinuableChildren(ctx, self)
        """The registry of continuable children (send_message, interrupt, list, report)."""

    @property
    def draining(self) -> bool:
        """True once the context is closing (new starts raise ``DRAINING``)."""
        return self._draining

    @classmethod
    def of(cls, ctx: Context) -> SubagentRuntime:
        """The context's runtime, installed on first use for the context's lifetime."""
        existing = ctx.__dict__["_services"].get(SERVICE_NAME)
        if existing is not None:
            if not isinstance(existing, SubagentRuntime):
                raise TypeError(f"ctx.{SERVICE_NAME} is a {type(existing).__name__}")
            return existing
        runtime = cls(ctx)
        ctx.provide(SERVICE_NAME, runtime)
        ctx.on_close(runtime.aclose)
        return runtime

    # -- providers ----------------------------------------------------------------

    def register_provider(self, provider: SubagentProvider) -> Disposer:
        """Add ``provider`` under its name; the disposer removes it.

        Runs already started stay alive when their provider is removed.
        """
        name = provider.name
        if name in self._providers:
            raise SubagentError(
                f'a subagent provider named "{name}" is already registered', "DUPLICATE_PROVIDER"
            )
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
        See :class:`~dsh.subagent.continuable.ContinuableChildren`."""
        return await self.continuable.start(name, request)

    def check_start(self, name: str, request: SubagentStartRequest) -> SubagentProvider:
        """The gate every start passes, in order: the provider, its capabilities,
        ``max_depth`` / ``output_schema`` / depth, draining, the signal."""
        provider = self._providers.get(name)
        if provider is None:
            raise SubagentError(f'no subagent provider registered for "{name}"', "NO_PROVIDER")
        missing = provider.capabilities.missing_for(request)
        if missing is not None:
            raise SubagentError(
                f'subagent provider "{name}" does not support the "{missing}" capability',
                "UNSUPPORTED_CAPABILITY",
            )
        if request.max_depth is not None:
            check_max_depth(request.max_depth)
        if request.output_schema is not None:
            check_output_schema(request.output_schema)
        violation = depth_violation(request.parent.session.header.meta, request.max_depth)
        if violation is not None:
            raise SubagentError(violation, "DEPTH_EXCEEDED")
        if self._draining:
            raise SubagentError("the subagent runtime is shutting down", "DRAINING")
        if request.signal.aborted:
            raise SubagentError(f"subagent start aborted: {request.signal.reason}", "ABORTED")
        return provider

    def _observe(self, run: SubagentRun, request: SubagentStartRequest) -> None:
        parent = request.parent
        bus = self._ctx.events
        base: dict[str, Any] = {
            "run_id": run.id,
            "provider": run.provider,
            "parent_agent": parent.id,
            "label": request.label,
        }
        bus.emit(EVENT_START, base, scope=parent.id)
        self._live[run.id] = run

        def on_settle(result: SubagentResult | None, error: BaseException | None) -> None:
            if not bus.has_listeners(EVENT_END):
                return
            data = dict(base)
            if result is not None:
                data["stop_reason"] = result.stop_reason
                data["diagnostic"] = result.diagnostic
                data["usage"] = result.usage
            else:
                data["stop_reason"] = "error"
                data["diagnostic"] = f"{type(error).__name__}: {error}"
            bus.emit(EVENT_END, data, scope=parent.id)

        run.result.add_listener(on_settle)
        run.on_disposed(lambda: self._live.pop(run.id, None))

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


async def _dispose_quietly(run: SubagentRun) -> None:
    try:
        await run.dispose()
    except Exception:
        _log.exception("disposing run %s at shutdown failed", run.id)
