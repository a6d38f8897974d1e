"""Agents and the agent loop.

An :class:`Agent` owns a session and runs *turns*. A turn starts from a user
message and is a loop of *steps*: build a request from the session, call the
model, append the assistant message, run its tool calls (concurrently when every
tool in a run of calls is concurrency-safe), append their results; until a step
has no tool calls. The turn then ends with ``turn/end`` and a stop reason:
``completed``, ``max-tokens``, ``refusal``, ``aborted``, ``blocked`` or ``error``.

Messages reach an agent four ways:

* :meth:`Agent.followup` queues a message that starts a new turn (now if idle);
* :meth:`Agent.steer` delivers a message into the running turn at its next step
  (starts a turn if idle);
* :meth:`Agent.inject` adds context without starting a turn;
* :meth:`Agent.cancel` aborts the running turn (queued messages are kept; the
  agent stays paused until the next :meth:`followup` or :meth:`resume`).

Turns run as tasks in the context's task group, so no agent task outlives the
context; :meth:`Agent.aclose` cancels and waits until the agent is quiescent.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import anyio

from dsh.core.content import Content, as_blocks, text_of
from dsh.core.effects import Disposer
from dsh.core.llm import BoundModel, ModelDone, ModelError, ModelRequest, TextDelta, ToolCall
from dsh.core.prompt import PromptSections
from dsh.core.session import Event, Session
from dsh.core.signals import AbortSignal
from dsh.core.tools import AgentTools, ToolContext, ToolResult, TurnBlocked

if TYPE_CHECKING:
    from dsh.core.context import Context

__all__ = ["Agent", "AgentObserver", "StopReason", "TurnOutcome", "last_output"]

_log = logging.getLogger("dsh.core.agent")

StopReason = Literal["completed", "max-tokens", "refusal", "aborted", "blocked", "error"]

AgentObserver = Callable[[Event], None]
"""Called for every event appended to the agent's session, and for transient
``assistant/delta`` events (``seq == -1``) carrying streamed text."""


class TurnOutcome:
    """How a turn ended: ``stop_reason``, an ``error`` message where there was one."""

    __slots__ = ("error", "stop_reason", "turn")

    def __init__(self, turn: int, stop_reason: StopReason, error: str | None) -> None:
        self.turn = turn
        self.stop_reason = stop_reason
        self.error = error

    @classmethod
    def of(cls, event: Event) -> TurnOutcome:
        """Read a ``turn/end`` event."""
        data = event.data
        return cls(int(data.get("turn", 0)), data["stop_reason"], data.get("error"))


def last_output(events: Sequence[Event], start: int = 0) -> str:
    """Text of the last non-empty assistant message in ``events[start:]``."""
    for index in range(len(events) - 1, start - 1, -1):
        event = events[index]
        if event.type == "assistant/message":
            text = text_of(event.data.get("content"))
            if text:
                return text
    return ""


class Agent:
    """One agent: a session, a model, a system prompt and the tools it may use."""

    __slots__ = (
        "__weakref__",
        "_blocked",
        "_cancel_cause",
        "_closed",
        "_delta_observers",
        "_driver_pending",
        "_idle",
        "_observers",
        "_paused",
        "_queue",
        "_running",
        "_scope",
        "_steer",
        "_turn_signal",
        "ctx",
        "label",
        "max_steps",
        "model",
        "parent_id",
        "prompt",
        "session",
        "tools",
        "turns",
    )

    def __init__(
        self,
        ctx: Context,
        session: Session,
        model: BoundModel,
        prompt: PromptSections,
        tools: AgentTools,
        *,
        parent_id: str | None = None,
        label: str | None = None,
        max_steps: int = 50,
    ) -> None:
        self.ctx = ctx
        self.session = session
        self.model = model
        self.prompt = prompt
        self.tools = tools
        self.parent_id = parent_id
        self.label = label
        self.max_steps = max_steps
        self.turns = _turns_so_far(session.events)
        self._queue: deque[tuple[list[dict[str, Any]], dict[str, Any] | None]] | None = None
        self._steer: list[tuple[list[dict[str, Any]], dict[str, Any]]] | None = None
        self._observers: tuple[AgentObserver, ...] = ()
        self._delta_observers: tuple[AgentObserver, ...] = ()
        self._running = False
        self._driver_pending = False
        self._paused = False
        self._closed = False
        self._idle: asyncio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._turn_signal: AbortSignal | None = None
        self._cancel_cause: str | None = None
        self._blocked: str | None = None

    # -- identity -----------------------------------------------------------------

    @property
    def id(self) -> str:
        """The agent id (its session id)."""
        return self.session.header.id

    @property
    def depth(self) -> int:
        """Delegation depth: 0 for a root agent, parent's + 1 for a child."""
        return int(self.session.header.meta.get("delegation_depth", 0))

    @property
    def cwd(self) -> str | None:
        """The working directory recorded in the session header."""
        cwd = self.session.header.meta.get("cwd")
        return str(cwd) if cwd is not None else None

    @property
    def running(self) -> bool:
        """True while a turn runs or is about to."""
        return self._running

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` has started."""
        return self._closed

    def __repr__(self) -> str:
        return f"<Agent {self.label or self.id} depth={self.depth} turns={self.turns}>"

    # -- observation --------------------------------------------------------------

    def observe(self, observer: AgentObserver, *, deltas: bool = True) -> Disposer:
        """Call ``observer`` for every appended event, and (``deltas=True``) for
        every streamed text delta as a transient ``assistant/delta`` event."""
        self._observers = (*self._observers, observer)
        if deltas:
            self._delta_observers = (*self._delta_observers, observer)

        def remove() -> None:
            self._observers = tuple(o for o in self._observers if o is not observer)
            self._delta_observers = tuple(o for o in self._delta_observers if o is not observer)

        return remove

    _MESSAGE_TYPES = frozenset(
        ("user/message", "assistant/message", "tool/call", "tool/result", "turn/start", "turn/end")
    )

    def record(self, type: str, data: Mapping[str, Any]) -> Event:
        """Append a bookkeeping event (not a message: adapters do not show it to the model).

        Observers see it like any other event. Message and turn types are refused:
        those belong to the loop.
        """
        if type in self._MESSAGE_TYPES:
            raise ValueError(f"{type!r} events are written by the agent loop, not recorded")
        return self._append(type, data)

    def _append(self, type: str, data: Mapping[str, Any]) -> Event:
        event = self.session.append(type, data)
        if self._observers:
            self._notify(self._observers, event)
        return event

    def _notify(self, observers: tuple[AgentObserver, ...], event: Event) -> None:
        for observer in observers:
            try:
                observer(event)
            except Exception:
                _log.exception("observer %r of agent %s failed", observer, self.id)

    # -- input --------------------------------------------------------------------

    def followup(self, content: Content) -> None:
        """Queue ``content`` as the user message of a new turn; start it if idle."""
        self._check_open()
        self._enqueue(as_blocks(content), None)

    def notify(self, content: Content, *, source: Mapping[str, Any] | None = None) -> None:
        """Deliver a runtime notice (job or child settlement): into the running turn,
        or as a new turn when idle. It is marked ``kind = "notice"``, not a user's words."""
        self._check_open()
        extra = {"kind": "notice", "source": dict(source or {})}
        if self._running:
            self._pending_steer().append((as_blocks(content), extra))
            return
        self._enqueue(as_blocks(content), extra)

    def _enqueue(self, blocks: list[dict[str, Any]], extra: dict[str, Any] | None) -> None:
        if self._queue is None:
            self._queue = deque()
        self._queue.append((blocks, extra))
        self._paused = False
        self._kick()

    def steer(self, content: Content) -> None:
        """Deliver ``content`` into the running turn at its next step (or start a turn)."""
        self._check_open()
        if not self._running:
            self.followup(content)
            return
        self._pending_steer().append((as_blocks(content), {"kind": "steer"}))

    def inject(self, content: Content) -> None:
        """Add ``content`` to the context without starting a turn."""
        self._check_open()
        blocks = as_blocks(content)
        if self._running:
            self._pending_steer().append((blocks, {"kind": "inject"}))
        else:
            self._append("user/message", {"content": blocks, "kind": "inject"})

    def resume(self) -> None:
        """Continue with queued messages after a :meth:`cancel`."""
        self._check_open()
        self._paused = False
        self._kick()

    @property
    def queued(self) -> int:
        """Messages waiting for a turn."""
        return len(self._queue) if self._queue else 0

    def cancel(self, cause: str = "cancelled") -> None:
        """Abort the running turn with ``cause``; queued messages are kept."""
        if not self._running:
            return
        self._paused = True
        if self._cancel_cause is None:
            self._cancel_cause = cause
        if self._turn_signal is not None:
            self._turn_signal.abort(cause)
        if self._scope is not None:
            self._scope.cancel()

    async def when_idle(self) -> None:
        """Wait until no turn is running or queued to run."""
        if not self._running:
            return
        if self._idle is None:
            self._idle = asyncio.Event()  # asyncio-only, and ~10x cheaper than anyio.Event
        await self._idle.wait()

    async def drive(self) -> None:
        """Run the pending turn(s) in the calling task if no driver task has taken
        them yet; otherwise wait until idle.

        A followup schedules its driver for the next loop iteration. A caller that
        is going to wait for the turn anyway can run it here instead, which spares
        a task (the common case of a foreground delegation).
        """
        if self._driver_pending:
            self._driver_pending = False
            await self._drive()
        else:
            await self.when_idle()

    async def run(self, content: Content) -> TurnOutcome:
        """Run one turn with ``content`` and wait for it: a convenience for scripts."""
        start = len(self.session)
        self.followup(content)
        await self.drive()
        for index in range(len(self.session) - 1, start - 1, -1):
            event = self.session.events[index]
            if event.type == "turn/end":
                return TurnOutcome.of(event)
        raise RuntimeError(f"agent {self.id} went idle without ending a turn")

    def close_now(self) -> bool:
        """Close at once if already quiescent (no turn, no running job); else False."""
        if self._closed:
            return True
        if self._running or self.ctx.jobs.has_running(self.id):
            return False
        self._closed = True
        if self._queue:
            self._queue.clear()
        self.session.close()
        self.ctx.agents._forget(self)
        return True

    async def aclose(self, cause: str = "agent closed") -> None:
        """Cancel any turn, wait until quiescent, release the session. Idempotent."""
        if self._closed or self.close_now():
            return
        self._closed = True
        if self._queue:
            self._queue.clear()
        if self._running:
            self._paused = True
            self.cancel(cause)
            with anyio.CancelScope(shield=True):
                await self.when_idle()
        if self.ctx.jobs.has_running(self.id):
            await self.ctx.jobs.kill_owned(self.id, cause)
        self.session.close()
        self.ctx.agents._forget(self)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"agent {self.label or self.id} is closed")

    def _pending_steer(self) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
        if self._steer is None:
            self._steer = []
        return self._steer

    def _kick(self) -> None:
        if self._running or not self._queue:
            return
        self._running = True
        self._driver_pending = True
        self.ctx.call_soon(self._spawn_driver)

    def _spawn_driver(self) -> None:
        if not self._driver_pending:
            return  # a caller of drive() is running the turn in its own task
        self._driver_pending = False
        try:
            self.ctx.spawn(self._drive)
        except RuntimeError:  # the context closed before the turn could start
            self._running = False
            if self._idle is not None:
                self._idle.set()
                self._idle = None

    # -- the loop -----------------------------------------------------------------

    async def _drive(self) -> None:
        try:
            while self._queue and not self._closed:
                await self._run_turn(*self._queue.popleft())
                if self._paused:
                    break
        finally:
            self._running = False
            self._scope = None
            self._turn_signal = None
            if self._idle is not None:
                self._idle.set()
                self._idle = None

    async def _run_turn(
        self, content: list[dict[str, Any]], extra: dict[str, Any] | None = None
    ) -> None:
        self.turns += 1
        turn = self.turns
        message: dict[str, Any] = {"content": content}
        if extra:
            message.update(extra)
        self._append("user/message", message)
        self._append("turn/start", {"turn": turn})
        self._blocked = None
        signal = AbortSignal()
        self._turn_signal = signal
        stop: StopReason = "completed"
        error: str | None = None
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self._cancel_cause is not None:
                    # cancel() arrived after followup() but before this turn began.
                    signal.abort(self._cancel_cause)
                    scope.cancel()
                try:
                    stop = await self._steps(signal)
                except ModelError as exc:
                    stop, error = "error", f"model call failed: {exc}"
                except TurnBlocked as exc:
                    stop, error = "blocked", str(exc) or "blocked"
                except _StepLimit as exc:
                    stop, error = "error", str(exc)
                except Exception as exc:
                    _log.exception("turn %d of agent %s failed", turn, self.id)
                    stop, error = "error", f"internal error: {type(exc).__name__}: {exc}"
        except BaseException:
            # Cancelled from outside the turn (the task running it, or the context
            # closing): record the turn as aborted and let the cancellation go on.
            self._scope = None
            cause = self._cancel_cause or "cancelled from outside the turn"
            signal.abort(cause)
            self._end_turn(turn, "aborted", cause)
            raise
        self._scope = None
        if (
            scope.cancelled_caught
            or stop == "aborted"
            or (self._cancel_cause is not None and stop == "completed")
        ):
            stop, error = "aborted", self._cancel_cause or "cancelled"
        signal.abort("turn ended")
        self._end_turn(turn, stop, error)

    def _end_turn(self, turn: int, stop: StopReason, error: str | None) -> None:
        data: dict[str, Any] = {"turn": turn, "stop_reason": stop}
        if error is not None:
            data["error"] = error
        self._turn_signal = None
        self._cancel_cause = None
        self._append("turn/end", data)

    def _flush_steer(self) -> None:
        pending, self._steer = self._steer, None
        for blocks, extra in pending or ():
            self._append("user/message", {"content": blocks, **extra})

    async def _steps(self, signal: AbortSignal) -> StopReason:
        session = self.session
        model = self.model
        step = 0
        while True:
            if signal.aborted:
                # Cancelled without reaching an await point (e.g. before the turn began).
                return "aborted"
            if self._steer:
                self._flush_steer()
            step += 1
            if step > self.max_steps:
                raise _StepLimit(f"step limit reached ({self.max_steps} model calls in one turn)")
            request = ModelRequest(
                model.model, self.prompt.render(), session.events, self.tools.specs(), model.options
            )
            parts: list[str] = []
            calls: list[ToolCall] = []
            done: ModelDone | None = None
            stream = model.adapter.stream(request, signal)
            try:
                async for item in stream:
                    if type(item) is TextDelta:
                        parts.append(item.text)
                        if self._delta_observers:
                            delta = Event(-1, "assistant/delta", {"text": item.text}, 0.0)
                            self._notify(self._delta_observers, delta)
                    elif type(item) is ToolCall:
                        calls.append(item)
                    elif type(item) is ModelDone:
                        done = item
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
            if done is None:
                raise ModelError("the model stream ended without a final event")
            text = "".join(parts)
            message: dict[str, Any] = {
                "content": [{"type": "text", "text": text}] if text else [],
                "stop_reason": done.stop_reason,
            }
            if done.usage is not None:
                message["usage"] = done.usage.to_json()
            self._append("assistant/message", message)
            if done.stop_reason == "max-tokens":
                return "max-tokens"
            if done.stop_reason == "refusal":
                return "refusal"
            if not calls:
                return "completed"
            for call in calls:
                self._append(
                    "tool/call", {"id": call.id, "name": call.name, "arguments": call.arguments}
                )
            results = await self._run_tools(calls, signal)
            for call, result in zip(calls, results, strict=True):
                data: dict[str, Any] = {
                    "call_id": call.id,
                    "name": call.name,
                    "content": result.blocks(),
                    "is_error": result.is_error,
                }
                if result.data is not None:
                    data["data"] = result.data
                self._append("tool/result", data)
            if self._blocked is not None:
                raise TurnBlocked(self._blocked)

    async def _run_tools(self, calls: list[ToolCall], signal: AbortSignal) -> list[ToolResult]:
        results: list[ToolResult | None] = [None] * len(calls)
        index = 0
        while index < len(calls):
            tool = self.tools.get(calls[index].name)
            end = index + 1
            if tool is not None and tool.concurrency_safe:
                while end < len(calls):
                    nxt = self.tools.get(calls[end].name)
                    if nxt is None or not nxt.concurrency_safe:
                        break
                    end += 1
            if end - index == 1:
                results[index] = await self._run_tool(calls[index], signal)
            else:
                async with anyio.create_task_group() as tg:
                    for position in range(index, end):
                        tg.start_soon(
                            self._run_tool_into, calls[position], signal, results, position
                        )
            index = end
        return [
            r if r is not None else ToolResult("tool produced no result", True) for r in results
        ]

    async def _run_tool_into(
        self, call: ToolCall, signal: AbortSignal, into: list[ToolResult | None], position: int
    ) -> None:
        into[position] = await self._run_tool(call, signal)

    async def _run_tool(self, call: ToolCall, signal: AbortSignal) -> ToolResult:
        if self.tools.refusal is not None:
            return ToolResult(self.tools.refusal, is_error=True)
        tool = self.tools.get(call.name)
        if tool is None:
            available = ", ".join(self.tools.names()) or "none"
            return ToolResult(
                f'unknown tool "{call.name}" (available tools: {available})', is_error=True
            )
        tool_signal, unlink = signal.linked()
        try:
            return await tool.invoke(call.arguments, ToolContext(self, call.id, tool_signal))
        except TurnBlocked as exc:
            self._blocked = str(exc) or f"tool {call.name} blocked the turn"
            return ToolResult(f"blocked: {self._blocked}", is_error=True)
        except Exception as exc:
            _log.debug("tool %s failed", call.name, exc_info=True)
            return ToolResult(f"tool {call.name} failed: {type(exc).__name__}: {exc}", True)
        finally:
            unlink()


class _StepLimit(Exception):
    pass


def _turns_so_far(events: Sequence[Event]) -> int:
    """Turns already in a log (O(1) for a log that ends with a ``turn/end``)."""
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.type in ("turn/end", "turn/start"):
            return int(event.data.get("turn", 0)) or sum(
                1 for e in events if e.type == "turn/start"
            )
    return 0
