"""``TemporalProvider``: delegations that run as Temporal workflows on ``dsh worker``s."""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import logging
import weakref
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from dsh.core import AbortSignal, Agent, Context
from dsh.subagent import (
    NotResumable,
    SubagentCapabilities,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subagent_temporal._batch import Batch, Batcher
from dsh.subagent_temporal._config import TemporalProviderConfig
from dsh.subagent_temporal._connect import connect, connect_kwargs, describe_target
from dsh.subagent_temporal._journal import DelegationJournal, JournalEntry
from dsh.subagent_temporal._run import TemporalRun
from dsh.subagent_temporal._store import ResultStore, open_store

if TYPE_CHECKING:
    from temporalio.client import Client

    from dsh.subagent_temporal._batch import Member

__all__ = ["TemporalProvider"]

_SDK_MODULES = ("temporalio.client", "temporalio.service", "temporalio.exceptions")
_DELIVERY_PAUSE = 0.5
_DELIVERY_PAUSE_MAX = 5.0
"""Seconds between tries to deliver a stop the server could not take (doubling)."""
_log = logging.getLogger("dsh.subagent_temporal")


class TemporalProvider:
    """Runs each child as a Temporal workflow (id = run id) on whichever ``dsh worker``
    polls the configured task queue, through the configured inner provider there.

    ``start`` starts the workflow and publishes the run; the result is the workflow's
    outcome; aborting the request's signal cancels the workflow (the worker disposes
    the child; the run settles ``aborted`` within heartbeat timeout + 2 s, or
    ``error`` if the server could not be reached to deliver the cancel).
    :meth:`reconnect` attaches a new run to a delegation started earlier (by this
    process or one that died); :meth:`outstanding` lists the delegations this parent
    started and has not collected. Capabilities are the inner provider's
    (``capabilities`` in the config); with ``budget`` the remaining budget travels in
    the workflow input and the worker runs the child's tree under it.
    """

    inherits_parent_context = False

    def __init__(self, config: TemporalProviderConfig) -> None:
        self.config = config
        self.name = config.name
        names = config.inner_capabilities()
        self.capabilities = SubagentCapabilities(
            output_schema="output_schema" in names,
            depth_limit="depth_limit" in names,
            tool_filter="tool_filter" in names,
            persona="persona" in names,
            budget="budget" in names,
        )
        self._client: Client | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Task[Client] | None = None
        self._store: ResultStore | None = None
        self._store_open = False
        self._journals: dict[str, DelegationJournal | None] = {}
        self._live: weakref.WeakSet[TemporalRun] = weakref.WeakSet()
        self._batcher: Batcher | None = None
        self._batches: dict[str, Batch] = {}
        self._watched: weakref.WeakSet[Context] = weakref.WeakSet()
        self._deliveries: dict[str, asyncio.Task[None]] = {}
        """Stops not yet delivered to the server, by run id (see :meth:`deliver_later`)."""

    def __repr__(self) -> str:
        return f"<TemporalProvider {self.name}: {self.config.provider} on {self.config.task_queue}>"

    # -- runs -------------------------------------------------------------------------

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start the delegation's workflow and publish the run."""
        return await self._launch(TemporalRun(self, request))

    async def reconnect(
        self,
        run_id: str,
        parent: Agent,
        *,
        signal: AbortSignal | None = None,
        label: str | None = None,
    ) -> SubagentRun:
        """A run attached to the delegation ``run_id`` (started earlier, by this parent
        process or one that died): its result is the workflow's outcome, aborting
        ``signal`` cancels it. The run is observed by ``parent``'s runtime (start and
        end events, progress) like any other. Raises
        :class:`~dsh.subagent.NotResumable` if Temporal does not know the run id."""
        request = SubagentStartRequest("", parent, signal or AbortSignal(), label=label)
        run = await self._launch(TemporalRun(self, request, attach=run_id))
        SubagentRuntime.of(parent.ctx).observe(run, request)
        return run

    def outstanding(self, ctx: Context, parent_session: str | None = None) -> list[JournalEntry]:
        """Delegations started through this provider (by any process sharing the
        journal) whose result no parent collected yet; ``parent_session`` narrows them
        to one parent agent's. Empty without a journal."""
        journal = self.journal(ctx)
        return journal.outstanding(parent_session) if journal is not None else []

    async def _launch(self, run: TemporalRun) -> SubagentRun:
        self._watch(run.request.parent.ctx)
        published = await run.launch()
        self._live.add(run)
        journal = self.journal(run.request.parent.ctx)

        def collected(result: SubagentResult | None, error: BaseException | None) -> None:
            self._live.discard(run)
            if journal is not None and not run.detached and result is not None:
                journal.collected(published.id, result.stop_reason)

        published.on_settled(collected)
        return published

    def _watch(self, ctx: Context) -> None:
        """Detach this context's live runs when it closes (``detach_on_close``)."""
        if not self.config.detach_on_close or ctx in self._watched:
            return
        self._watched.add(ctx)

        async def detach_all() -> None:
            for run in list(self._live):
                if run.request.parent.ctx is ctx:
                    run.detach()

        ctx.on_close(detach_all)

    # -- shared resources --------------------------------------------------------------

    async def client(self) -> Client:
        """The provider's client on this event loop (connected once; the SDK is
        imported on first use, in a worker thread)."""
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is loop:
            return self._client
        task = self._connecting
        if task is None or task.get_loop() is not loop or (task.done() and task.exception()):
            # in a context of its own: the connection outlives the run that opened it
            task = self._connecting = loop.create_task(
                self._connect(), name=f"connect {self.name}", context=contextvars.Context()
            )
        client = await asyncio.shield(task)
        self._client, self._client_loop = client, loop
        return client

    async def _connect(self) -> Client:
        for module in _SDK_MODULES:
            await anyio.to_thread.run_sync(importlib.import_module, module)
        return await connect(self.config.address, self.config.namespace)

    async def batcher(self) -> Batcher:
        """The batcher of this event loop."""
        client = await self.client()
        batcher = self._batcher
        if batcher is None or batcher.client is not client:
            batcher = self._batcher = Batcher(self.config, client, self._new_batch)
        return batcher

    def _new_batch(self, workflow_id: str, size: int | None) -> Batch:
        assert self._client is not None
        batch = self._batches[workflow_id] = Batch(
            self._client, self.config, workflow_id, size=size, on_empty=self._forget
        )
        return batch

    def _forget(self, batch: Batch) -> None:
        if self._batches.get(batch.workflow_id) is batch:
            del self._batches[batch.workflow_id]

    async def find_batch(self, workflow_id: str) -> Batch:
        """The batch workflow ``workflow_id`` (raises ``NotResumable`` if unknown)."""
        from temporalio.service import RPCError, RPCStatusCode

        batch = self._batches.get(workflow_id)
        if batch is not None and batch.client is self._client:
            return batch
        client = await self.client()
        try:
            description = await client.get_workflow_handle(workflow_id).describe(
                rpc_timeout=timedelta(seconds=10)
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise NotResumable(
                    f"no delegation workflow {workflow_id!r} on Temporal at {self.target()}"
                    " (never started, or past the namespace's retention)"
                ) from None
            raise
        memo = await description.memo_value("dsh", {})
        size = memo.get("delegations") if isinstance(memo, dict) else None
        return self._batches.get(workflow_id) or self._new_batch(
            workflow_id, size if isinstance(size, int) else None
        )

    def deliver_later(self, ctx: Context, member: Member, reason: str, *, terminate: bool) -> None:
        """Keep trying to stop ``member``'s delegation (terminate its whole workflow, or
        signal it to cancel this one) until the server takes the request, while ``ctx``
        is open: a stop the server could not be told of when the run settled."""
        key = member.run_id
        if key in self._deliveries:
            return
        batch = member.batch

        async def deliver() -> None:
            pause = _DELIVERY_PAUSE
            try:
                while True:
                    sent = await (
                        batch.terminate(reason) if terminate else batch.cancel(member, reason)
                    )
                    if sent.status != "unreachable":
                        _log.info("%s: stop of %s delivered late: %s", self.name, key, sent)
                        return
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, _DELIVERY_PAUSE_MAX)
            finally:
                self._deliveries.pop(key, None)

        self._deliveries[key] = ctx.spawn(deliver)

    def target(self) -> str:
        """Where this provider connects (for messages; no credentials)."""
        try:
            return describe_target(connect_kwargs(self.config.address, self.config.namespace))
        except Exception:
            return self.config.address or "the configured server"

    def store(self) -> ResultStore | None:
        """The result store, if one is configured."""
        if not self._store_open:
            self._store = open_store(self.config.result_store)
            self._store_open = True
        return self._store

    def journal(self, ctx: Context) -> DelegationJournal | None:
        """The journal in force for ``ctx`` (config ``journal``, else the sessions
        directory's ``temporal-<name>.jsonl``, else none)."""
        configured = self.config.journal
        if configured == "off":
            return None
        if configured:
            key = configured
        elif ctx.sessions is not None:
            key = str(Path(ctx.sessions.directory) / f"temporal-{self.name}.jsonl")
        else:
            return None
        journal = self._journals.get(key)
        if journal is None:
            journal = self._journals[key] = DelegationJournal(key)
        return journal
