"""The agent loop: one turn of an agent, in :class:`TurnLoop` (the base class of
:class:`~dsh.core.Agent`).

A turn starts from a user message and is a loop of *steps*: build a request
from the session, call the model, append the assistant message, run its tool
calls (concurrently when every tool in a run of calls is concurrency-safe),
append their results; until a step has no tool calls. It ends with
``turn/end`` and a stop reason: ``completed``, ``max-tokens``, ``refusal``,
``aborted``, ``blocked`` or ``error``. A turn a stopped process cut off can be taken
up again from the log (:mod:`dsh.core._cut_off`): its ``turn/start`` is written again
with ``"resumed": true``, its unanswered tool calls run, and its steps go on.

A session write the disk refuses (full, over quota) ends the turn ``error`` with
:class:`~dsh.core.sessions.SessionError`'s message; the events stay in the log and are
saved by the next write that succeeds.

The loop knows the agent's context only through :class:`TurnHost` (the tracing
switch and the permission filter): what needs the agent or the context by their
own types (tool contexts, tracing hooks) the agent supplies. Nothing it skips costs
more than an attribute check: tracing hooks run only when a tracer is installed,
the permission filter weighs only governed tools, deltas are built only for an
observer that asked for them. Use :meth:`Agent.followup` / :meth:`Agent.run` to
start turns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

import anyio

from dsh.core._content import text_of
from dsh.core._cut_off import CONTINUE, cut_off_tail
from dsh.core._llm import (
    BoundModel,
    ModelDone,
    ModelError,
    ModelRequest,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from dsh.core._prompt import PromptSections
from dsh.core._redact import redact_urls
from dsh.core._session import Event, Session, SessionError
from dsh.core._signals import AbortSignal
from dsh.core._tool_tape import ToolKeys, ToolTape
from dsh.core._tools import AgentTools, CallContext, Tool, ToolResult, TurnBlocked

__all__ = [
    "AgentObserver",
    "StopReason",
    "TracedCall",
    "TurnHost",
    "TurnLoop",
    "TurnOutcome",
    "last_output",
    "turns_so_far",
]

_log = logging.getLogger("dsh.core._agent")

_scope_type: Callable[[], anyio.CancelScope] | None = None
"""anyio's cancel scope class for asyncio, the backend dsh runs on (found at the first
turn): ``anyio.CancelScope()`` looks the backend up on every call, six calls a turn."""


def _find_scope_type() -> Callable[[], anyio.CancelScope]:
    global _scope_type
    _scope_type = type(anyio.CancelScope())
    return _scope_type


StopReason = Literal["completed", "max-tokens", "refusal", "aborted", "blocked", "error"]

AgentObserver = Callable[[Event], None]
"""Called for every event appended to the agent's session, and for transient
``assistant/delta`` events (``seq == -1``) carrying streamed text."""

Pending = list[tuple[list[dict[str, Any]], dict[str, Any]]]
"""Messages steered into a running turn: (content blocks, extra fields)."""


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


class TracedCall(Protocol):
    """One turn, model call or tool call the agent loop reported to
    :class:`~dsh.core.tracing.Tracing`."""

    def end(
        self, outcome: TurnOutcome | ModelDone | ToolResult | None, error: BaseException | None
    ) -> None:
        """It is over: ``outcome`` is the turn's :class:`~dsh.core.TurnOutcome`, the
        model's final event (None if the stream ended without one) or the tool's
        result; ``error`` what it raised, if it raised (a cancellation, a model error,
        a tool's exception). Called once, in the task that started it."""


class _Switch(Protocol):
    @property
    def enabled(self) -> bool: ...


class _Offer(Protocol):
    def offered(self, tools: AgentTools) -> tuple[ToolSpec, ...]: ...


class TurnHost(Protocol):
    """What the loop needs of the agent's context (a :class:`~dsh.core.Context`)."""

    @property
    def tracing(self) -> _Switch:
        """The tracing seam: the loop calls the agent's tracing hooks only when enabled."""

    @property
    def permissions(self) -> _Offer:
        """Which of the agent's tools the model is shown."""


class _StepLimit(Exception):
    pass


class TurnLoop:
    """An agent's session, observers, steered messages and the turn that runs on them.

    The base class of :class:`~dsh.core.Agent`, which sets every attribute and
    supplies the hooks (:meth:`_tool_context` and the ``_trace_*`` hooks)."""

    __slots__ = (
        "_blocked",
        "_cancel_cause",
        "_delta_observers",
        "_host",
        "_observers",
        "_scope",
        "_steer",
        "_tool_keys",
        "_turn_signal",
        "id",
        "max_steps",
        "model",
        "prompt",
        "session",
        "tool_tape",
        "tools",
        "turns",
    )

    id: str
    """The agent id (its session id)."""
    # (a plain attribute, set once, not a property: the delegation hot path reads it a
    # dozen times per child)
    session: Session
    model: BoundModel
    prompt: PromptSections
    tools: AgentTools
    tool_tape: ToolTape | None
    """Where this agent's tool calls are recorded and replayed (None: nowhere): its
    context's ``tool_tape``, or its parent's (a child inherits the tape it runs under)."""
    max_steps: int
    turns: int
    _host: TurnHost
    _observers: tuple[AgentObserver, ...]
    _delta_observers: tuple[AgentObserver, ...]
    _steer: Pending | None
    _blocked: str | None
    _cancel_cause: str | None
    _scope: anyio.CancelScope | None
    _turn_signal: AbortSignal | None
    _tool_keys: ToolKeys | None

    # -- hooks the agent supplies -------------------------------------------------

    def _tool_context(self, call_id: str, signal: AbortSignal) -> CallContext:
        """What a tool call of this agent sees (a :class:`~dsh.core.ToolContext`)."""
        raise NotImplementedError

    def _trace_turn(self, turn: int) -> TracedCall:
        """The tracer's record of turn ``turn`` (called only when tracing is enabled)."""
        raise NotImplementedError

    def _trace_model_call(self, request: ModelRequest) -> TracedCall:
        """The tracer's record of a model call (only when tracing is enabled)."""
        raise NotImplementedError

    def _trace_tool_call(self, call: ToolCall) -> TracedCall:
        """The tracer's record of a tool call (only when tracing is enabled)."""
        raise NotImplementedError

    # -- the log --------------------------------------------------------------------

    def _append(self, type: str, data: Mapping[str, Any]) -> Event:
        try:
            event = self.session.append(type, data)
        except SessionError:
            # not saved (the disk refused it) but in the log: observers see it all the same
            if self._observers:
                self._notify(self._observers, self.session.events[-1])
            raise
        observers = self._observers
        if observers:
            # (_notify inlined: a watched agent, e.g. an in-process child, calls this per event)
            for observer in observers:
                try:
                    observer(event)
                except Exception:
                    _log.exception("observer %r of agent %s failed", observer, self.id)
        return event

    def _notify(self, observers: tuple[AgentObserver, ...], event: Event) -> None:
        for observer in observers:
            try:
                observer(event)
            except Exception:
                _log.exception("observer %r of agent %s failed", observer, self.id)

    def _pending_steer(self) -> Pending:
        if self._steer is None:
            self._steer = []
        return self._steer

    def _flush_steer(self) -> None:
        pending, self._steer = self._steer, None
        for blocks, extra in pending or ():
            self._append("user/message", {"content": blocks, **extra})

    # -- a turn ---------------------------------------------------------------------

    async def _run_turn(self, content: list[dict[str, Any]], extra: dict[str, Any] | None) -> None:
        unsaved: SessionError | None = None  # the disk refused a write: the turn ends "error"
        resumed = extra is CONTINUE  # the cut-off turn of a resumed log, taken up again
        if resumed:
            turn = self.turns
            start: dict[str, Any] = {"turn": turn, "resumed": True}
        else:
            self.turns += 1
            turn = self.turns
            start = {"turn": turn}
            message: dict[str, Any] = {"content": content}
            if extra:
                message.update(extra)
            try:
                self._append("user/message", message)
            except SessionError as exc:  # in the log all the same; the next write saves it
                unsaved = exc
        try:
            self._append("turn/start", start)
        except SessionError as exc:
            unsaved = unsaved or exc
        traced = self._trace_turn(turn) if self._host.tracing.enabled else None
        self._blocked = None
        signal = AbortSignal()
        self._turn_signal = signal
        stop: StopReason = "completed"
        error: str | None = None
        try:
            with (_scope_type or _find_scope_type())() as scope:
                self._scope = scope
                if self._cancel_cause is not None:
                    # cancel() arrived after followup() but before this turn began.
                    signal.abort(self._cancel_cause)
                    scope.cancel()
                try:
                    if unsaved is not None:
                        raise unsaved  # the disk refuses the session's writes: no model call
                    if resumed:
                        stop = await self._continue_cut_off(signal)
                    else:
                        stop = await self._steps(signal)
                except SessionError as exc:
                    stop, error = "error", str(exc)
                except ModelError as exc:
                    stop, error = "error", f"model call failed: {exc}"
                except TurnBlocked as exc:
                    stop, error = "blocked", str(exc) or "blocked"
                except _StepLimit as exc:
                    stop, error = "error", str(exc)
                except Exception as exc:
                    _log.exception("turn %d of agent %s failed", turn, self.id)
                    reason = redact_urls(str(exc))  # DshErrors redact themselves
                    stop, error = "error", f"internal error: {type(exc).__name__}: {reason}"
        except BaseException as exc:
            # Cancelled from outside the turn (the task running it, or the context
            # closing): record the turn as aborted and let the cancellation go on.
            self._scope = None
            cause = self._cancel_cause or "cancelled from outside the turn"
            signal.abort(cause)
            self._end_turn(turn, "aborted", cause)
            if traced is not None:
                traced.end(TurnOutcome(turn, "aborted", cause), exc)
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
        if traced is not None:
            traced.end(TurnOutcome(turn, stop, error), None)

    def _end_turn(self, turn: int, stop: StopReason, error: str | None) -> None:
        data: dict[str, Any] = {"turn": turn, "stop_reason": stop}
        if error is not None:
            data["error"] = error
        self._turn_signal = None
        self._cancel_cause = None
        try:  # noqa: SIM105 (contextlib.suppress costs three calls a turn)
            self._append("turn/end", data)
        except SessionError:
            pass  # in the log all the same; the next write saves it

    async def _steps(self, signal: AbortSignal, step: int = 0) -> StopReason:
        """The turn's steps until one asks for no tool (``step``: model calls made so far)."""
        session = self.session
        model = self.model
        host = self._host
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
                model.model,
                self.prompt.render(),
                session.events,
                host.permissions.offered(self.tools),
                model.options,
            )
            parts: list[str] = []
            calls: list[ToolCall] = []
            done: ModelDone | None = None
            stream = model.adapter.stream(request, signal)
            traced = self._trace_model_call(request) if host.tracing.enabled else None
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
            except BaseException as exc:
                if traced is not None:
                    traced.end(None, exc)
                    traced = None
                raise
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
            if traced is not None:
                traced.end(done, None)
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
            if len(calls) == 1:
                # the common case: no grouping, no list of slots, and one coroutine
                # frame less to resume when the call suspends (a delegation does)
                results = [await self._run_tool(calls[0], signal)]
            else:
                results = await self._run_tools(calls, signal)
            self._record_results(calls, results)

    async def _continue_cut_off(self, signal: AbortSignal) -> StopReason:
        """The rest of a cut-off turn (see :mod:`dsh.core._cut_off`): its tool calls
        without a result run again, then its steps go on."""
        if signal.aborted:
            return "aborted"
        steps, pending, ended = cut_off_tail(self.session.events)
        if ended is not None:
            return ended
        if pending:
            self._record_results(pending, await self._run_tools(pending, signal))
        return await self._steps(signal, steps)

    def _record_results(self, calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> None:
        """Append a step's ``tool/result`` events; a tool that blocked the turn ends it."""
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
        """Several calls of one step: each run of concurrency-safe tools together."""
        results: list[ToolResult | None] = [None] * len(calls)
        tools = self.tools
        index = 0
        while index < len(calls):
            tool = tools.get(calls[index].name)
            end = index + 1
            if tool is not None and tool.concurrency_safe:
                while end < len(calls):
                    nxt = tools.get(calls[end].name)
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
        tools = self.tools
        if tools.refusal is not None:
            return ToolResult(tools.refusal, is_error=True)
        tool = tools.get(call.name)
        if tool is None:
            available = ", ".join(tools.names()) or "none"
            return ToolResult(
                f'unknown tool "{call.name}" (available tools: {available})', is_error=True
            )
        tape = self.tool_tape
        if tape is not None:
            return await self._taped_tool(tape, tool, call, signal)
        return await self._invoke(tool, call, signal)

    async def _taped_tool(
        self, tape: ToolTape, tool: Tool, call: ToolCall, signal: AbortSignal
    ) -> ToolResult:
        """A tool call with a tape (``ctx.tool_tape``): asked first, recorded after."""
        keys = self._tool_keys
        if keys is None:
            keys = self._tool_keys = ToolKeys()
        conversation, number = keys.key(self.prompt.render(), self.session.events)
        action, answer = await tape.before(conversation, number, call.name, call.arguments)
        if answer is not None:
            return answer
        result = await self._invoke(tool, call, signal)
        if action == "record":
            await tape.after(conversation, number, call.name, call.arguments, result)
        return result

    async def _invoke(self, tool: Tool, call: ToolCall, signal: AbortSignal) -> ToolResult:
        traced = self._trace_tool_call(call) if self._host.tracing.enabled else None
        failure: Exception | None = None
        tool_signal, unlink = signal.linked()
        try:
            result = await tool.invoke(call.arguments, self._tool_context(call.id, tool_signal))
        except TurnBlocked as exc:
            self._blocked = str(exc) or f"tool {call.name} blocked the turn"
            result, failure = ToolResult(f"blocked: {self._blocked}", is_error=True), exc
        except Exception as exc:
            _log.debug("tool %s failed", call.name, exc_info=True)
            result = ToolResult(f"tool {call.name} failed: {type(exc).__name__}: {exc}", True)
            failure = exc
        except BaseException as exc:
            if traced is not None:
                traced.end(None, exc)
            raise
        finally:
            unlink()
        if traced is not None:
            traced.end(result, failure)
        return result


def turns_so_far(events: Sequence[Event]) -> int:
    """Turns already in a log (O(1) for a log that ends with a ``turn/end``)."""
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.type in ("turn/end", "turn/start"):
            return int(event.data.get("turn", 0)) or sum(
                1 for e in events if e.type == "turn/start"
            )
    return 0
