"""The A2A agent executor behind ``dsh a2a``: each A2A task is one turn of a dsh agent.

* A task's ``contextId`` names a conversation: its first task creates a dsh agent
  (at the delegation depth and under the limit the caller sent in
  ``message.metadata.dsh``, else those of this process's environment, else depth 0;
  a caller already deeper than its limit is refused: ``rejected``); later tasks of
  the same context continue that agent while it is alive. One task at a time per
  context (a second one is ``rejected``); idle conversations are closed after
  ``context_idle`` seconds, and beyond ``max_contexts`` the least recently used idle
  one is.
* The agent's streamed text goes out as chunks of the artifact ``response``, which
  always holds the agent's last non-empty message (``append = false`` starts the
  next message); tool calls, running usage and the agent's own delegations (the bus
  events ``subagent/start|progress|end``, nested runs included, with their ``path``)
  go out as ``working`` status updates carrying one progress item in
  ``metadata.dsh.progress``.
* The turn's stop reason maps ``completed`` → ``completed``, ``aborted`` →
  ``canceled``, ``refusal`` → ``rejected``, ``max-tokens`` / ``error`` / ``blocked`` →
  ``failed`` (with the reason in the status message); the final status update's
  metadata has the tree-wide usage (``dsh.usage``) and the dsh stop reason
  (``dsh.stopReason``).
* ``CancelTask`` cancels the turn (``canceled``); :meth:`DshAgentExecutor.cancel_all`
  cancels every running turn (shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from dsh.a2a._protocol import ARTIFACT_ID, META_KEY, plain, to_struct_value
from dsh.core import Agent, Context, Event, TurnOutcome, last_output, text_of
from dsh.subagent import SubagentProgress, SubagentUsage
from dsh.subagent.kit import DelegationRelay, Lineage, RelayWatch, turn_usage

__all__ = ["DshAgentExecutor"]

_log = logging.getLogger("dsh.a2a")

_EXCERPT = 400
_WIND_DOWN = 5.0
"""Seconds a new task of a context waits for the previous (cancelled) turn to end."""
_FLUSH = 2.0
"""Seconds a cancel waits for progress already produced to go out first."""

A2AEvent = TaskStatusUpdateEvent | TaskArtifactUpdateEvent

_STATES: dict[str, TaskState] = {
    "completed": TaskState.TASK_STATE_COMPLETED,
    "aborted": TaskState.TASK_STATE_CANCELED,
    "refusal": TaskState.TASK_STATE_REJECTED,
}
_DSH_STOP = {"blocked": "error"}


def _now_status(
    state: TaskState, text: str | None = None, task_id: str = "", context_id: str = ""
) -> TaskStatus:
    status = TaskStatus(state=state)
    if text:
        status.message.CopyFrom(
            Message(
                role=Role.ROLE_AGENT,
                message_id=f"status-{time.monotonic_ns()}",
                parts=[Part(text=text)],
                task_id=task_id,
                context_id=context_id,
            )
        )
    status.timestamp.FromDatetime(datetime.now(UTC))
    return status


def _status_event(
    task_id: str,
    context_id: str,
    state: TaskState,
    text: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> TaskStatusUpdateEvent:
    event = TaskStatusUpdateEvent(
        task_id=task_id,
        context_id=context_id,
        status=_now_status(state, text, task_id, context_id),
    )
    if metadata:
        event.metadata.update(to_struct_value(metadata))
    return event


class _TaskRun:
    """One A2A task: the turn of its conversation's agent, and its outgoing events."""

    def __init__(
        self,
        task_id: str,
        context_id: str,
        agent: Agent,
        queue: EventQueue,
        heartbeat: float | None,
    ) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.agent = agent
        self.queue = queue
        self.heartbeat = heartbeat
        self.start = len(agent.session)
        self.outbox: asyncio.Queue[A2AEvent | None] = asyncio.Queue()
        self.closed = False
        """True once the terminal status is written (nothing more may go out)."""
        self.cancel_requested = False
        self.cancel_written = asyncio.Event()
        self.shutdown_cause: str | None = None
        self.text_seq: int | None = None
        self.artifact_text: list[str] = []
        self.own_usage = SubagentUsage.unknown()
        self.relay: RelayWatch | None = None
        """The delegations under the agent during this task, relayed as progress."""
        self.pump: asyncio.Task[None] | None = None

    # -- outgoing events ------------------------------------------------------------

    def send(self, event: A2AEvent) -> None:
        if not self.closed:
            self.outbox.put_nowait(event)

    def status(
        self,
        state: TaskState,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TaskStatusUpdateEvent:
        return _status_event(self.task_id, self.context_id, state, text, metadata)

    def progress(self, item: SubagentProgress) -> None:
        self.send(
            self.status(
                TaskState.TASK_STATE_WORKING, metadata={META_KEY: {"progress": item.to_json()}}
            )
        )

    def text(self, text: str, seq: int) -> None:
        first = self.text_seq != seq
        if first:
            self.text_seq = seq
            self.artifact_text = []
        self.artifact_text.append(text)
        self.send(
            TaskArtifactUpdateEvent(
                task_id=self.task_id,
                context_id=self.context_id,
                artifact=Artifact(
                    artifact_id=ARTIFACT_ID, name="response", parts=[Part(text=text)]
                ),
                append=not first,
                last_chunk=False,
            )
        )

    async def run_pump(self) -> None:
        """Send the outbox's events in order (a ``working`` heartbeat when idle, so an
        instance sharing the task store notices a cancel written by another one)."""
        while True:
            try:
                event = await asyncio.wait_for(self.outbox.get(), self.heartbeat)
            except TimeoutError:
                if self.closed:
                    continue
                event = self.status(TaskState.TASK_STATE_WORKING)
                self.outbox.put_nowait(event)
                continue
            try:
                if event is None:
                    return
                if not self.closed:
                    await self.queue.enqueue_event(event)
            except Exception as exc:  # the task's queue is gone (the task ended elsewhere)
                _log.debug("task %s: an update was not delivered: %r", self.task_id, exc)
                self.closed = True
            finally:
                self.outbox.task_done()

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until the events produced so far have gone out (bounded by ``timeout``)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.outbox.join(), timeout)

    # -- the agent's own events --------------------------------------------------------

    def observe(self, event: Event) -> None:
        if event.seq == -1:
            if event.type == "assistant/delta":
                text = event.data.get("text")
                if text:
                    self.text(str(text), len(self.agent.session))
            return
        data = event.data
        if event.type == "assistant/message":
            text = text_of(data.get("content"))
            if text and self.text_seq != event.seq:  # not streamed: send it whole
                self.text(text, event.seq)
            usage = data.get("usage")
            if usage:
                self.own_usage = turn_usage(self.agent.session.events, self.start)
                self.progress(SubagentProgress("usage", usage=self.own_usage))
        elif event.type == "tool/call":
            self.progress(
                SubagentProgress(
                    "tool_call",
                    tool_call_id=str(data.get("id")),
                    name=str(data.get("name", "tool")),
                    title=str(data.get("name", "tool")),
                    arguments=data.get("arguments"),
                )
            )
        elif event.type == "tool/result":
            content = text_of(data.get("content"))
            if len(content) > _EXCERPT:
                content = content[:_EXCERPT] + "…"
            self.progress(
                SubagentProgress(
                    "tool_update",
                    tool_call_id=str(data.get("call_id")),
                    status="failed" if data.get("is_error") else "completed",
                    text=content or None,
                )
            )

    def total_usage(self) -> SubagentUsage:
        own = turn_usage(self.agent.session.events, self.start)
        relay = self.relay
        return own + relay.usage if relay is not None and relay.runs else own


class _Conversation:
    """The agent of one A2A context."""

    __slots__ = ("agent", "last_used", "run")

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.run: _TaskRun | None = None
        self.last_used = time.monotonic()

    @property
    def idle(self) -> bool:
        return self.run is None and not self.agent.running


class DshAgentExecutor(AgentExecutor):
    """Runs A2A tasks on the agents of one dsh :class:`~dsh.core.Context` (see the
    module docstring). ``heartbeat``: seconds between ``working`` updates of a quiet
    task (several instances sharing a task store notice a remote cancel by it)."""

    def __init__(
        self,
        ctx: Context,
        *,
        max_contexts: int = 256,
        context_idle: float = 1800.0,
        heartbeat: float | None = None,
    ) -> None:
        self._ctx = ctx
        self._max_contexts = max_contexts
        self._context_idle = context_idle
        self._heartbeat = heartbeat
        self._conversations: dict[str, _Conversation] = {}
        self._tasks: dict[str, _TaskRun] = {}
        self._relay: DelegationRelay | None = DelegationRelay(ctx)
        self._reaper: asyncio.Task[None] | None = ctx.spawn(self._reap_idle)

    @property
    def running(self) -> int:
        """Tasks running now."""
        return len(self._tasks)

    # -- AgentExecutor ------------------------------------------------------------------

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run one turn for the task (see the module docstring)."""
        task_id, context_id, message = context.task_id, context.context_id, context.message
        if not task_id or not context_id or message is None:
            raise ValueError("an A2A task needs a task id, a context id and a message")
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=_now_status(TaskState.TASK_STATE_SUBMITTED),
                    history=[message],
                )
            )

        async def refuse(state: TaskState, text: str) -> None:
            await event_queue.enqueue_event(_status_event(task_id, context_id, state, text))

        blocks = _to_dsh_blocks(message)
        if not blocks:
            await refuse(TaskState.TASK_STATE_REJECTED, "the message has no text to work on")
            return
        try:
            lineage = _lineage(message, context.metadata)
        except ValueError as exc:
            await refuse(TaskState.TASK_STATE_REJECTED, f"invalid dsh metadata: {exc}")
            return
        if lineage is not None:
            refusal = lineage.deeper_than_allowed()
            if refusal is not None:
                await refuse(TaskState.TASK_STATE_REJECTED, refusal)
                return
        conversation = self._conversations.get(context_id)
        if conversation is not None and conversation.run is None and conversation.agent.running:
            # the previous task of this context was cancelled and is still winding down
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(conversation.agent.when_idle(), _WIND_DOWN)
        if conversation is not None and not conversation.idle:
            await refuse(
                TaskState.TASK_STATE_REJECTED,
                f"context {context_id} already has a task running; wait for it or cancel it",
            )
            return
        if conversation is None:
            try:
                conversation = self._new_conversation(context_id, lineage)
            except Exception as exc:
                await refuse(TaskState.TASK_STATE_FAILED, f"dsh a2a cannot start an agent: {exc}")
                return
        await self._run_turn(conversation, task_id, context_id, blocks, event_queue)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task's turn; the task ends ``canceled``."""
        task_id, context_id = context.task_id or "", context.context_id or ""
        cause = "cancelled by the A2A client"
        run = self._tasks.get(task_id)
        metadata: dict[str, Any] | None = None
        if run is not None and not run.closed:
            run.cancel_requested = True
            run.agent.cancel(cause)
            await run.flush(_FLUSH)  # progress produced before the cancel goes out first
            run.closed = True
            metadata = {META_KEY: {"usage": run.total_usage().to_json(), "stopReason": "aborted"}}
        event = _status_event(task_id, context_id, TaskState.TASK_STATE_CANCELED, cause, metadata)
        try:
            await event_queue.enqueue_event(event)
        finally:
            if run is not None:
                run.cancel_written.set()

    # -- turns --------------------------------------------------------------------------

    def _new_conversation(self, context_id: str, lineage: Lineage | None) -> _Conversation:
        meta: dict[str, Any] = {"cwd": self._ctx.cwd, "origin": "a2a", "a2a_context": context_id}
        if lineage is not None:
            meta.update(lineage.session_meta())
        self._make_room()
        conversation = _Conversation(self._ctx.agents.create(meta=meta))
        self._conversations[context_id] = conversation
        return conversation

    async def _run_turn(
        self,
        conversation: _Conversation,
        task_id: str,
        context_id: str,
        blocks: list[dict[str, Any]],
        event_queue: EventQueue,
    ) -> None:
        agent = conversation.agent
        run = _TaskRun(task_id, context_id, agent, event_queue, self._heartbeat)
        conversation.run = run
        self._tasks[task_id] = run
        assert self._relay is not None
        run.relay = self._relay.watch(agent, run.progress)
        unobserve = agent.observe(run.observe)
        run.send(run.status(TaskState.TASK_STATE_WORKING))
        run.pump = asyncio.get_running_loop().create_task(
            run.run_pump(), name=f"dsh a2a task {task_id}"
        )
        finished = False
        try:
            agent.followup(blocks)
            await agent.when_idle()
            finished = True
        except BaseException:
            agent.cancel(run.shutdown_cause or "the A2A task was cancelled")
            raise
        finally:
            unobserve()
            self._forget(run)
            conversation.run = None
            conversation.last_used = time.monotonic()
            if not finished:
                run.closed = True
                run.pump.cancel()
        await self._finish(run)

    async def _finish(self, run: _TaskRun) -> None:
        events = run.agent.session.events
        outcome = _outcome(events, run.start)
        output = last_output(events, run.start)
        if output and output != "".join(run.artifact_text) and not run.closed:
            # an answer whose text did not stream as the artifact holds it: send it whole
            artifact = _artifact(output)
            artifact.metadata.update({META_KEY: {"replace": True}})
            run.send(
                TaskArtifactUpdateEvent(
                    task_id=run.task_id, context_id=run.context_id, artifact=artifact, append=False
                )
            )
        run.outbox.put_nowait(None)
        assert run.pump is not None
        await run.pump
        if run.cancel_requested:
            with contextlib.suppress(TimeoutError):  # cancel() writes the terminal status
                await asyncio.wait_for(run.cancel_written.wait(), _FLUSH)
            return
        if run.closed:
            return
        stop = outcome.stop_reason if outcome is not None else "error"
        state = _STATES.get(stop, TaskState.TASK_STATE_FAILED)
        text: str | None = None
        if outcome is None:
            text = "the dsh turn ended without a turn/end event"
        elif stop == "aborted":
            text = run.shutdown_cause or outcome.error or "the turn was cancelled"
        elif stop == "refusal":
            text = "the agent declined the task"
        elif stop == "max-tokens":
            text = "the model hit its token limit before finishing"
        elif stop != "completed":
            text = f"dsh turn {stop}: {outcome.error or stop}"
        metadata = {
            META_KEY: {
                "usage": run.total_usage().to_json(),
                "stopReason": _DSH_STOP.get(stop, stop),
            }
        }
        run.closed = True
        await run.queue.enqueue_event(run.status(state, text, metadata))

    def _forget(self, run: _TaskRun) -> None:
        self._tasks.pop(run.task_id, None)
        if run.relay is not None:
            run.relay.close()

    def cancel_all(self, cause: str) -> None:
        """Cancel every running turn (their tasks end ``canceled`` with ``cause``)."""
        for run in list(self._tasks.values()):
            run.shutdown_cause = cause
            run.agent.cancel(cause)

    # -- conversations ------------------------------------------------------------------

    def _make_room(self) -> None:
        if len(self._conversations) < self._max_contexts:
            return
        idle = [(c.last_used, key) for key, c in self._conversations.items() if c.idle]
        if not idle:
            raise RuntimeError(f"too many conversations ({self._max_contexts} busy)")
        _, oldest = min(idle)
        self._drop(oldest)

    def _drop(self, context_id: str) -> None:
        conversation = self._conversations.pop(context_id, None)
        if conversation is not None and not conversation.agent.close_now():
            self._ctx.spawn(conversation.agent.aclose, "the A2A context was idle too long")

    async def _reap_idle(self) -> None:
        period = max(min(self._context_idle / 4, 60.0), 0.05)
        while True:
            await asyncio.sleep(period)
            limit = time.monotonic() - self._context_idle
            for key, conversation in list(self._conversations.items()):
                if conversation.idle and conversation.last_used < limit:
                    self._drop(key)

    async def aclose(self) -> None:
        """Stop listening and reaping (the context closes the agents)."""
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None


def _artifact(text: str) -> Artifact:
    return Artifact(artifact_id=ARTIFACT_ID, name="response", parts=[Part(text=text)])


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _lineage(message: Message, request_metadata: dict[str, Any]) -> Lineage | None:
    found = Lineage.from_meta(plain(message.metadata))
    if found is None:
        found = Lineage.from_meta(request_metadata)
    return found if found is not None else Lineage.from_env(os.environ)


def _to_dsh_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        elif kind == "data":
            blocks.append(
                {"type": "text", "text": json.dumps(plain(part.data), ensure_ascii=False)}
            )
        elif kind == "url":
            blocks.append({"type": "text", "text": f"[{part.filename or part.url}]({part.url})"})
        elif kind == "raw":
            name = part.filename or "attachment"
            blocks.append({"type": "text", "text": f"[binary part {name} omitted]"})
    return blocks


def _outcome(events: Sequence[Event], start: int) -> TurnOutcome | None:
    for index in range(len(events) - 1, start - 1, -1):
        if events[index].type == "turn/end":
            return TurnOutcome.of(events[index])
    return None
