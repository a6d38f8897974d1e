"""The parent's side of batch workflows: grouping starts, following outcomes.

:class:`Batcher` — delegations started within ``batch_window`` of each other (a
fan-out: a model's parallel tool calls, a ``gather`` of starts) go out as one
workflow, up to ``batch_max`` delegations or :data:`BATCH_BYTES` of input; the rest
go out as further workflows. A lone delegation is a batch of one: its workflow id is
its run id; a member of a larger batch has run id ``<workflow id>/<n>``.

:class:`Batch` — one workflow as this process sees it. One task follows the
workflow's history (a long poll, resumed across server restarts) and hands each
member its outcome the moment its activity completes; while someone listens to a
member's progress, another task describes the workflow every ``progress_interval``
and hands each member the heartbeat details of its running activity. Both serve every
member of the batch, so they run in a context of their own and stop when the last
member leaves.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from dsh.subagent import SubagentProgress, SubagentUsage
from dsh.subagent_temporal._live import ProgressReader
from dsh.subagent_temporal._spec import (
    CANCEL_SIGNAL,
    SINGLE_ACTIVITY,
    WORKFLOW_NAME,
    BatchResult,
    CancelRequest,
    DelegationBatch,
    DelegationOutcome,
    DelegationSpec,
)

if TYPE_CHECKING:
    from temporalio.api.history.v1 import HistoryEvent
    from temporalio.client import Client, WorkflowHandle

    from dsh.subagent_temporal._config import TemporalProviderConfig

__all__ = ["BATCH_BYTES", "Batch", "Batcher", "Delivery", "Member", "Pending"]

_log = logging.getLogger("dsh.subagent_temporal")

BATCH_BYTES = 1024 * 1024
"""Input bytes one batch workflow takes at most (Temporal refuses payloads over 2 MB)."""
_RPC_TIMEOUT = timedelta(seconds=10)
_RETRY_PAUSE = 1.0
_FOLLOW_PAUSE = 0.1
"""Seconds between reads of a big batch's new events (an outcome reaches its run at
most this much later; hundreds of children cost a read per pause, not one each)."""
_SMALL = 8
"""Batches with at most this many outcomes awaited are read without a pause."""
_UNREACHABLE = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "INTERNAL", "CANCELLED"}
_FATAL = {"PERMISSION_DENIED", "UNAUTHENTICATED", "UNIMPLEMENTED", "INVALID_ARGUMENT"}


class Member:
    """One delegation of a batch: its outcome (a future) and who listens to its progress."""

    __slots__ = ("activity_id", "batch", "emit", "on_spent", "outcome", "reader", "run_id")

    def __init__(self, batch: Batch, activity_id: str) -> None:
        self.batch = batch
        self.activity_id = activity_id
        self.run_id = (
            batch.workflow_id
            if activity_id == SINGLE_ACTIVITY
            else f"{batch.workflow_id}/{activity_id}"
        )
        self.outcome: asyncio.Future[DelegationOutcome] = batch.loop.create_future()
        self.reader = ProgressReader()
        self.emit: Callable[[SubagentProgress], None] | None = None
        self.on_spent: Callable[[SubagentUsage, int | None], None] | None = None
        """Told the delegation's running usage and model calls (every attempt's) at each
        poll: the parent-side meter of a budgeted run (see :meth:`Batch.meter`)."""

    async def wait(self) -> DelegationOutcome:
        """The delegation's outcome (when its activity completes, or the workflow ends)."""
        self.batch.follow()
        return await asyncio.shield(self.outcome)

    def feed(self, details: dict[str, Any]) -> None:
        """Heartbeat details of the member's running activity."""
        attempt = details.get("attempt")
        items = details.get("items")
        usage = details.get("usage")
        self.reader.feed(
            attempt if isinstance(attempt, int) else 1,
            str(details.get("worker") or ""),
            items if isinstance(items, list) else [],
            usage if isinstance(usage, dict) else None,
            self.emit,
        )
        on_spent, usage_now = self.on_spent, self.reader.usage
        if on_spent is not None and usage_now is not None:
            spent = details.get("spent")
            turns = spent.get("turns") if isinstance(spent, dict) else None
            on_spent(usage_now, turns if isinstance(turns, int) else None)


class Batch:
    """One batch workflow as this process sees it (see the module docstring)."""

    def __init__(
        self,
        client: Client,
        config: TemporalProviderConfig,
        workflow_id: str,
        *,
        size: int | None,
        on_empty: Callable[[Batch], None],
    ) -> None:
        self.client = client
        self.config = config
        self.workflow_id = workflow_id
        self.size = size
        """Delegations in the workflow (None: not known, reconnecting)."""
        self.loop = asyncio.get_running_loop()
        self.handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id)
        self.members: dict[str, Member] = {}
        self.resolved: dict[str, DelegationOutcome] = {}
        self.closed = False
        """True once the workflow's end was seen."""
        self.given_up: set[str] = set()
        """Members whose run stopped waiting before their outcome was seen."""
        self._on_empty = on_empty
        self._follower: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None

    def join(self, activity_id: str) -> Member:
        """The member for ``activity_id`` (its outcome resolved already if seen)."""
        member = self.members.get(activity_id)
        if member is None:
            member = self.members[activity_id] = Member(self, activity_id)
            seen = self.resolved.get(activity_id)
            if seen is not None:
                member.outcome.set_result(seen)
        return member

    def leave(self, member: Member) -> None:
        """The member's run is done with it; the last one stops the batch's tasks."""
        member.emit = member.on_spent = None
        if self.members.get(member.activity_id) is member:
            del self.members[member.activity_id]
        if not self.members:
            for task in (self._follower, self._poller):
                if task is not None:
                    task.cancel()
            self._follower = self._poller = None
            self._on_empty(self)

    # -- outcomes ---------------------------------------------------------------------

    def follow(self) -> None:
        """Start following the history (once)."""
        if self._follower is None or self._follower.done():
            self._follower = self.loop.create_task(
                self._follow(), name=f"follow {self.workflow_id}", context=contextvars.Context()
            )

    async def _follow(self) -> None:
        from temporalio.api.common.v1 import WorkflowExecution
        from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
        from temporalio.service import RPCError, RPCStatusCode

        service = self.client.workflow_service
        last = 0
        scheduled: dict[int, str] = {}
        while not self.closed:
            token = b""
            try:
                while not self.closed:
                    response = await service.get_workflow_execution_history(
                        GetWorkflowExecutionHistoryRequest(
                            namespace=self.client.namespace,
                            execution=WorkflowExecution(workflow_id=self.workflow_id),
                            next_page_token=token,
                            wait_new_event=True,
                            maximum_page_size=1000,
                        ),
                        retry=True,
                    )
                    for event in response.history.events:
                        if event.event_id > last:
                            last = event.event_id
                            await self._on_event(event, scheduled)
                    token = response.next_page_token
                    if not token:
                        break
                    waiting = sum(not m.outcome.done() for m in self.members.values())
                    if response.history.events and waiting > _SMALL and not self.closed:
                        # a big batch: let events gather, one read per pause, not per child
                        await asyncio.sleep(_FOLLOW_PAUSE)
                if not self.closed:  # no more pages, no close event: read it again
                    await asyncio.sleep(_RETRY_PAUSE)
            except asyncio.CancelledError:
                raise
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    self._end("error", "the workflow is gone (past the namespace's retention?)")
                    return
                if exc.status.name in _FATAL:
                    self._end("error", f"temporal: following the workflow failed: {exc.message}")
                    return
                # unreachable (a server restart), or a page token the server no longer
                # takes: read the history again from the start (events seen are skipped)
                _log.info("following %s: %s; reading again", self.workflow_id, exc.message)
                unreachable = exc.status.name in _UNREACHABLE
                await asyncio.sleep(_RETRY_PAUSE if unreachable else 0.1)
            except Exception as exc:
                _log.warning("following %s failed", self.workflow_id, exc_info=True)
                self._end("error", f"temporal: following the workflow failed: {exc}")
                return

    async def _on_event(self, event: HistoryEvent, scheduled: dict[int, str]) -> None:
        from temporalio.api.enums.v1 import EventType

        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_id
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            key = scheduled.get(attributes.scheduled_event_id)
            if key is not None:
                (outcome,) = await self.client.data_converter.decode(
                    list(attributes.result.payloads), [DelegationOutcome]
                )
                self._resolve(key, outcome)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payloads = event.workflow_execution_completed_event_attributes.result.payloads
            if payloads:
                (result,) = await self.client.data_converter.decode(list(payloads), [BatchResult])
                for key, outcome in result.outcomes.items():
                    self._resolve(key, outcome)
            self._end("error", "temporal: the workflow ended without this delegation's outcome")
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            reason = event.workflow_execution_terminated_event_attributes.reason
            self._end("aborted", f"the workflow was terminated: {reason or 'no reason given'}")
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
            self._end("aborted", "the workflow was cancelled")
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
            self._end("error", "temporal: the workflow timed out")
        elif kind in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
        ):
            self._end("error", "temporal: the workflow failed")

    def _resolve(self, key: str, outcome: DelegationOutcome) -> None:
        if key in self.resolved:
            return
        self.resolved[key] = outcome
        member = self.members.get(key)
        if member is not None and not member.outcome.done():
            member.outcome.set_result(outcome)

    def _end(self, stop_reason: str, diagnostic: str) -> None:
        """The workflow is over: members without an outcome get this one."""
        self.closed = True
        for key, member in list(self.members.items()):
            if not member.outcome.done():
                self._resolve(key, DelegationOutcome(stop_reason, diagnostic=diagnostic))

    # -- cancel -----------------------------------------------------------------------

    async def cancel(self, member: Member, reason: str, *, within: float | None = None) -> Delivery:
        """Ask the workflow to cancel ``member``'s delegation (trying for ``within`` s)."""
        request = CancelRequest([member.activity_id], reason)
        return await self._deliver(
            lambda timeout: self.handle.signal(CANCEL_SIGNAL, request, rpc_timeout=timeout),
            within,
            f"cancelling {member.run_id}",
        )

    def give_up(self, member: Member) -> bool:
        """``member``'s run stops waiting without its outcome; True when nothing of the
        workflow is awaited any more (every delegation resolved or given up), so ending
        the whole workflow harms no one."""
        self.given_up.add(member.activity_id)
        if self.size is None:
            return False
        return len(self.given_up | set(self.resolved)) >= self.size

    async def terminate(self, reason: str, *, within: float | None = None) -> Delivery:
        """End the whole workflow now (no worker needed; its activities' workers see it
        at their next heartbeat and dispose their children)."""
        return await self._deliver(
            lambda timeout: self.handle.terminate(reason=reason, rpc_timeout=timeout),
            within,
            f"terminating {self.workflow_id}",
        )

    async def _deliver(
        self,
        call: Callable[[timedelta], Awaitable[object]],
        within: float | None,
        what: str,
    ) -> Delivery:
        from temporalio.service import RPCError

        status: Literal["unreachable", "refused"]
        limit = _RPC_TIMEOUT if within is None else timedelta(seconds=max(within, 0.05))
        try:
            await asyncio.wait_for(call(limit), limit.total_seconds() + 0.5)
        except TimeoutError:
            detail = f"no answer within {limit.total_seconds():g} s"
            status = "unreachable"
        except RPCError as exc:
            detail = exc.message or exc.status.name
            status = "unreachable" if exc.status.name in _UNREACHABLE else "refused"
        except Exception as exc:  # the SDK's client errors: the server is not there
            detail = f"{type(exc).__name__}: {exc}"
            status = "unreachable"
        else:
            return Delivery("sent", "")
        _log.debug("%s failed (%s): %s", what, status, detail)
        return Delivery(status, detail)

    # -- progress ---------------------------------------------------------------------

    def want_progress(self, member: Member, emit: Callable[[SubagentProgress], None]) -> None:
        """Hand ``member``'s progress to ``emit`` (until :meth:`leave` or ``emit`` = None)."""
        member.emit = emit
        self._start_polling()

    def meter(self, member: Member, on_spent: Callable[[SubagentUsage, int | None], None]) -> None:
        """Tell ``on_spent`` what ``member``'s delegation spent so far, at every poll
        (until :meth:`leave`), whether or not anyone wants its progress."""
        member.on_spent = on_spent
        self._start_polling()

    def _start_polling(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = self.loop.create_task(
                self._poll(), name=f"progress of {self.workflow_id}", context=contextvars.Context()
            )

    async def _poll(self) -> None:
        decode = self.client.data_converter.decode
        while not self.closed and any(_polled(m) for m in self.members.values()):
            try:
                description = await self.handle.describe(rpc_timeout=_RPC_TIMEOUT)
                for activity in description.raw_description.pending_activities:
                    member = self.members.get(activity.activity_id)
                    payloads = activity.heartbeat_details.payloads
                    if member is None or not _polled(member) or not payloads:
                        continue
                    if member.outcome.done():
                        continue
                    (details,) = await decode(list(payloads))
                    if isinstance(details, dict):
                        member.feed(details)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _log.debug("progress of %s: %s", self.workflow_id, exc)
            await asyncio.sleep(self.config.progress_interval)


class Delivery(NamedTuple):
    """What became of a cancel or terminate request: ``sent``; ``unreachable`` (the
    server could not be reached: nothing was delivered); ``refused`` (the server said
    no: the workflow is over, or the request is not allowed)."""

    status: Literal["sent", "unreachable", "refused"]
    detail: str


@dataclass
class Pending:
    """A delegation waiting for its batch to go out."""

    spec: DelegationSpec
    size: int
    started: asyncio.Future[Member]


class Batcher:
    """Groups the starts of one provider on one event loop into batch workflows."""

    def __init__(
        self,
        config: TemporalProviderConfig,
        client: Client,
        batch_for: Callable[[str, int], Batch],
    ) -> None:
        self.config = config
        self.client = client
        self.loop = asyncio.get_running_loop()
        self._batch_for = batch_for
        self._pending: list[Pending] = []
        self._bytes = 0
        self._timer: asyncio.TimerHandle | None = None

    def submit(self, spec: DelegationSpec, size: int) -> Pending:
        """Queue ``spec`` (``size`` bytes as JSON); ``started`` resolves with its member
        once its workflow started (or with the start's error)."""
        if self._pending and (
            len(self._pending) >= self.config.batch_max or self._bytes + size > BATCH_BYTES
        ):
            self._flush()
        entry = Pending(spec, size, self.loop.create_future())
        entry.started.add_done_callback(_retrieve)
        self._pending.append(entry)
        self._bytes += size
        if len(self._pending) >= self.config.batch_max:
            self._flush()
        elif self._timer is None:
            self._timer = self.loop.call_later(self.config.batch_window, self._flush)
        return entry

    def withdraw(self, entry: Pending) -> bool:
        """Take ``entry`` back if its batch has not gone out (True), else False."""
        if entry not in self._pending:
            return False
        self._pending.remove(entry)
        self._bytes -= entry.size
        if not self._pending and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not entry.started.done():
            entry.started.cancel()
        return True

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        entries, self._pending, self._bytes = self._pending, [], 0
        if entries:
            self.loop.create_task(
                self._start(entries), name="start a delegation batch", context=contextvars.Context()
            )

    async def _start(self, entries: list[Pending]) -> None:
        workflow_id = f"{self.config.id_prefix}{uuid.uuid4().hex}"
        single = len(entries) == 1
        specs = []
        for number, entry in enumerate(entries):
            spec = entry.spec
            spec.activity_id = SINGLE_ACTIVITY if single else str(number)
            spec.run_id = workflow_id if single else f"{workflow_id}/{number}"
            specs.append(spec)
        try:
            from temporalio.common import WorkflowIDReusePolicy

            await self.client.start_workflow(
                WORKFLOW_NAME,
                DelegationBatch(specs),
                id=workflow_id,
                task_queue=self.config.task_queue,
                result_type=BatchResult,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                memo={"dsh": {"delegations": len(specs), "provider": self.config.provider}},
                static_summary=(specs[0].label if single else f"{len(specs)} delegations") or None,
                rpc_timeout=_RPC_TIMEOUT,
            )
        except BaseException as exc:
            for entry in entries:
                if not entry.started.done():
                    entry.started.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        batch = self._batch_for(workflow_id, len(specs))
        for entry, spec in zip(entries, specs, strict=True):
            member = batch.join(spec.activity_id)
            if not entry.started.done():
                entry.started.set_result(member)


def _polled(member: Member) -> bool:
    """Someone follows ``member``'s heartbeats (its progress, or its spending)."""
    return member.emit is not None or member.on_spent is not None


def _retrieve(future: asyncio.Future[Member]) -> None:
    """Mark a start's error retrieved (its run may have stopped waiting for it)."""
    if not future.cancelled():
        future.exception()
