"""The A2A agent executor behind ``dsh a2a``: each A2A task is one turn of a dsh agent.

* A task's ``contextId`` names a conversation: its first task creates a dsh agent
  (at the delegation depth and under the limit the caller sent in
  ``message.metadata.dsh``, else those of this process's environment, else depth 0;
  a caller already deeper than its limit is refused: ``rejected``); later tasks of
  the same context continue that agent while it is alive. Conversations are kept per
  caller (the user its bearer token names, see :mod:`dsh.a2a._auth`): another
  token's ``contextId`` starts a fresh agent, never continues theirs. One task at a time per
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
* ``CancelTask`` cancels the turn (``canceled``); :meth:`DshAgentExecutor.cancel_task`
  cancels one from the server's side (a stream whose client is gone, see
  :mod:`dsh.a2a._orphans`), :meth:`DshAgentExecutor.cancel_all` every running turn
  (shutdown).

The events of one task go out through a :class:`~dsh.a2a._task_run.TaskRun`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types import (
    Artifact,
    Message,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
)

from dsh.a2a._orphans import TASK_KEY
from dsh.a2a._protocol import ARTIFACT_ID, META_KEY, plain
from dsh.a2a._task_run import TaskRun, now_status, status_event
from dsh.core import Agent, Context, TurnOutcome, last_output
from dsh.core.sessions import Event
from dsh.subagent.kit import DelegationRelay, Lineage

__all__ = ["DshAgentExecutor"]

_log = logging.getLogger("dsh.a2a")

_WIND_DOWN = 5.0
"""Seconds a new task of a context waits for the previous (cancelled) turn to end."""
_FLUSH = 2.0
"""Seconds a cancel waits for progress already produced to go out first."""

_STATES: dict[str, TaskState] = {
    "completed": TaskState.TASK_STATE_COMPLETED,
    "aborted": TaskState.TASK_STATE_CANCELED,
    "refusal": TaskState.TASK_STATE_REJECTED,
}
_DSH_STOP = {"blocked": "error"}


class _Conversation:
    """The agent of one A2A context."""

    __slots__ = ("agent", "last_used", "run")

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.run: TaskRun | None = None
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
        self._conversations: dict[tuple[str, str], _Conversation] = {}
        """Conversations by (owner, context id): a caller never continues another's."""
        self._tasks: dict[str, TaskRun] = {}
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
        context.call_context.state[TASK_KEY] = task_id  # who follows it: see _orphans
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=now_status(TaskState.TASK_STATE_SUBMITTED),
                    history=[message],
                )
            )

        async def refuse(state: TaskState, text: str) -> None:
            await event_queue.enqueue_event(status_event(task_id, context_id, state, text))

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
        key = (context.call_context.user.user_name, context_id)
        conversation = self._conversations.get(key)
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
                conversation = self._new_conversation(key, lineage)
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
        event = status_event(task_id, context_id, TaskState.TASK_STATE_CANCELED, cause, metadata)
        try:
            await event_queue.enqueue_event(event)
        finally:
            if run is not None:
                run.cancel_written.set()

    # -- turns --------------------------------------------------------------------------

    def _new_conversation(self, key: tuple[str, str], lineage: Lineage | None) -> _Conversation:
        meta: dict[str, Any] = {"cwd": self._ctx.cwd, "origin": "a2a", "a2a_context": key[1]}
        if lineage is not None:
            meta.update(lineage.session_meta())
        self._make_room()
        agent = self._ctx.agents.create(meta=meta)
        if lineage is not None and lineage.budget is not None:
            try:  # the caller's remainder: this agent and its whole tree (until closed)
                lift = self._ctx.subagents.budget_tree(agent, lineage.budget)
            except Exception:
                agent.close_now()
                raise

            async def lifted() -> None:
                lift()

            agent.on_close(lifted)
        conversation = _Conversation(agent)
        self._conversations[key] = conversation
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
        run = TaskRun(task_id, context_id, agent, event_queue, self._heartbeat)
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

    async def _finish(self, run: TaskRun) -> None:
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
        stop: str = outcome.stop_reason if outcome is not None else "error"
        verdict = self._verdict(run.agent) if stop == "aborted" else None
        if verdict is not None:  # stopped at its budget: failed, with the cap in the text
            stop = "budget" if verdict[0] == "budget" else "error"
        state = _STATES.get(stop, TaskState.TASK_STATE_FAILED)
        text: str | None = None
        if verdict is not None:
            text = (
                verdict[1]
                if stop == "budget"
                else f"the budget could not be enforced: {verdict[1]}"
            )
        elif outcome is None:
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

    def _verdict(self, agent: Agent) -> tuple[str, str] | None:
        """Why ``agent``'s budget stopped it (None: it has none, or was not stopped)."""
        if not self._ctx.has_service("subagents"):
            return None
        meter = self._ctx.subagents.budget_meter(agent)
        return meter.verdict() if meter is not None else None

    def _forget(self, run: TaskRun) -> None:
        self._tasks.pop(run.task_id, None)
        if run.relay is not None:
            run.relay.close()

    def is_running(self, task_id: str) -> bool:
        """True while the task's turn runs in this process."""
        run = self._tasks.get(task_id)
        return run is not None and not run.closed

    def cancel_task(self, task_id: str, cause: str) -> bool:
        """Cancel the task's turn (the task ends ``canceled`` with ``cause``); False when
        it does not run in this process."""
        run = self._tasks.get(task_id)
        if run is None or run.closed:
            return False
        run.shutdown_cause = cause
        run.agent.cancel(cause)
        return True

    def cancel_all(self, cause: str) -> None:
        """Cancel every running turn (their tasks end ``canceled`` with ``cause``)."""
        for task_id in list(self._tasks):
            self.cancel_task(task_id, cause)

    # -- conversations ------------------------------------------------------------------

    def _make_room(self) -> None:
        if len(self._conversations) < self._max_contexts:
            return
        idle = [(c.last_used, key) for key, c in self._conversations.items() if c.idle]
        if not idle:
            raise RuntimeError(f"too many conversations ({self._max_contexts} busy)")
        _, oldest = min(idle)
        self._drop(oldest)

    def _drop(self, key: tuple[str, str]) -> None:
        conversation = self._conversations.pop(key, None)
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
