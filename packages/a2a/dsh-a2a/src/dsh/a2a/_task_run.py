"""One A2A task's run inside ``dsh a2a``: its turn's outgoing events, in order.

:class:`TaskRun` turns the agent's events (streamed text, tool calls and results,
usage, the delegations under it) into A2A status and artifact updates and sends them
through an outbox, one at a time, to the task's event queue (a ``working`` heartbeat
when idle, for instances that share a task store). :func:`status_event` builds a
status update.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any

from a2a.server.events import EventQueue
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from dsh.a2a._protocol import ARTIFACT_ID, META_KEY, to_struct_value
from dsh.core import Agent, text_of
from dsh.core.sessions import Event
from dsh.subagent import SubagentProgress, SubagentUsage
from dsh.subagent.kit import RelayWatch, turn_usage

__all__ = ["A2AEvent", "TaskRun", "now_status", "status_event"]

_log = logging.getLogger("dsh.a2a")

_EXCERPT = 400

A2AEvent = TaskStatusUpdateEvent | TaskArtifactUpdateEvent
"""What a run sends besides the task itself."""


def now_status(
    state: TaskState, text: str | None = None, task_id: str = "", context_id: str = ""
) -> TaskStatus:
    """A status of ``state`` now (with an agent message of ``text``)."""
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


def status_event(
    task_id: str,
    context_id: str,
    state: TaskState,
    text: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> TaskStatusUpdateEvent:
    """A status update of ``state`` now (``text``: its message; ``metadata``: the event's)."""
    event = TaskStatusUpdateEvent(
        task_id=task_id,
        context_id=context_id,
        status=now_status(state, text, task_id, context_id),
    )
    if metadata:
        event.metadata.update(to_struct_value(metadata))
    return event


class TaskRun:
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
        return status_event(self.task_id, self.context_id, state, text, metadata)

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
