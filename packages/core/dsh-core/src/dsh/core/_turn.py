"""The agent loop: one turn of an :class:`~dsh.core._agent.Agent`.

A turn starts from a user message and is a loop of *steps*: build a request
from the session, call the model, append the assistant message, run its tool
calls (concurrently when every tool in a run of calls is concurrency-safe),
append their results; until a step has no tool calls. It ends with
``turn/end`` and a stop reason: ``completed``, ``max-tokens``, ``refusal``,
``aborted``, ``blocked`` or ``error``.

A session write the disk refuses (full, over quota) ends the turn ``error`` with
:class:`~dsh.core.SessionError`'s message; the events stay in the log and are
saved by the next write that succeeds.

These functions are the agent's own machinery (they work on its internals);
use :meth:`Agent.followup` / :meth:`Agent.run` to start turns.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import anyio

from dsh.core._content import text_of
from dsh.core._llm import ModelDone, ModelError, ModelRequest, TextDelta, ToolCall
from dsh.core._redact import redact_urls
from dsh.core._session import Event, SessionError
from dsh.core._signals import AbortSignal
from dsh.core._tools import ToolContext, ToolResult, TurnBlocked

if TYPE_CHECKING:
    from dsh.core._agent import Agent

__all__ = ["StopReason", "TurnOutcome", "last_output", "run_turn"]

_log = logging.getLogger("dsh.core._agent")

StopReason = Literal["completed", "max-tokens", "refusal", "aborted", "blocked", "error"]


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


class _StepLimit(Exception):
    pass


async def run_turn(
    agent: Agent, content: list[dict[str, Any]], extra: dict[str, Any] | None = None
) -> None:
    agent.turns += 1
    turn = agent.turns
    message: dict[str, Any] = {"content": content}
    if extra:
        message.update(extra)
    unsaved = _append(agent, "user/message", message, None)
    unsaved = _append(agent, "turn/start", {"turn": turn}, unsaved)
    tracing = agent.ctx.tracing  # the tracing seam: hooks only when a tracer is installed
    traced = tracing.turn(agent, turn) if tracing.enabled else None
    agent._blocked = None
    signal = AbortSignal()
    agent._turn_signal = signal
    stop: StopReason = "completed"
    error: str | None = None
    try:
        with anyio.CancelScope() as scope:
            agent._scope = scope
            if agent._cancel_cause is not None:
                # cancel() arrived after followup() but before this turn began.
                signal.abort(agent._cancel_cause)
                scope.cancel()
            try:
                if unsaved is not None:
                    raise unsaved  # the disk refuses the session's writes: no model call
                stop = await _steps(agent, signal)
            except SessionError as exc:
                stop, error = "error", str(exc)
            except ModelError as exc:
                stop, error = "error", f"model call failed: {exc}"
            except TurnBlocked as exc:
                stop, error = "blocked", str(exc) or "blocked"
            except _StepLimit as exc:
                stop, error = "error", str(exc)
            except Exception as exc:
                _log.exception("turn %d of agent %s failed", turn, agent.id)
                reason = redact_urls(str(exc))  # ModelError and other DshErrors redact themselves
                stop, error = "error", f"internal error: {type(exc).__name__}: {reason}"
    except BaseException as exc:
        # Cancelled from outside the turn (the task running it, or the context
        # closing): record the turn as aborted and let the cancellation go on.
        agent._scope = None
        cause = agent._cancel_cause or "cancelled from outside the turn"
        signal.abort(cause)
        _end_turn(agent, turn, "aborted", cause)
        if traced is not None:
            traced.end(TurnOutcome(turn, "aborted", cause), exc)
        raise
    agent._scope = None
    if (
        scope.cancelled_caught
        or stop == "aborted"
        or (agent._cancel_cause is not None and stop == "completed")
    ):
        stop, error = "aborted", agent._cancel_cause or "cancelled"
    signal.abort("turn ended")
    _end_turn(agent, turn, stop, error)
    if traced is not None:
        traced.end(TurnOutcome(turn, stop, error), None)


def _end_turn(agent: Agent, turn: int, stop: StopReason, error: str | None) -> None:
    data: dict[str, Any] = {"turn": turn, "stop_reason": stop}
    if error is not None:
        data["error"] = error
    agent._turn_signal = None
    agent._cancel_cause = None
    _append(agent, "turn/end", data, None)


def _append(
    agent: Agent, type: str, data: dict[str, Any], failed: SessionError | None
) -> SessionError | None:
    """Append an event the turn cannot do without; a write the disk refused is
    returned (the first one, ``failed``, if given), not raised: the event is in the
    log all the same, and the turn ends ``error`` with the refusal's message."""
    try:
        agent._append(type, data)
    except SessionError as exc:
        return failed or exc
    return failed


async def _steps(agent: Agent, signal: AbortSignal) -> StopReason:
    session = agent.session
    model = agent.model
    step = 0
    while True:
        if signal.aborted:
            # Cancelled without reaching an await point (e.g. before the turn began).
            return "aborted"
        if agent._steer:
            agent._flush_steer()
        step += 1
        if step > agent.max_steps:
            raise _StepLimit(f"step limit reached ({agent.max_steps} model calls in one turn)")
        request = ModelRequest(
            model.model,
            agent.prompt.render(),
            session.events,
            agent.ctx.permissions.offered(agent.tools),
            model.options,
        )
        parts: list[str] = []
        calls: list[ToolCall] = []
        done: ModelDone | None = None
        stream = model.adapter.stream(request, signal)
        tracing = agent.ctx.tracing  # the tracing seam: hooks only when a tracer is installed
        traced = tracing.model_call(agent, request) if tracing.enabled else None
        try:
            async for item in stream:
                if type(item) is TextDelta:
                    parts.append(item.text)
                    if agent._delta_observers:
                        delta = Event(-1, "assistant/delta", {"text": item.text}, 0.0)
                        agent._notify(agent._delta_observers, delta)
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
        agent._append("assistant/message", message)
        if done.stop_reason == "max-tokens":
            return "max-tokens"
        if done.stop_reason == "refusal":
            return "refusal"
        if not calls:
            return "completed"
        for call in calls:
            agent._append(
                "tool/call", {"id": call.id, "name": call.name, "arguments": call.arguments}
            )
        results = await _run_tools(agent, calls, signal)
        for call, result in zip(calls, results, strict=True):
            data: dict[str, Any] = {
                "call_id": call.id,
                "name": call.name,
                "content": result.blocks(),
                "is_error": result.is_error,
            }
            if result.data is not None:
                data["data"] = result.data
            agent._append("tool/result", data)
        if agent._blocked is not None:
            raise TurnBlocked(agent._blocked)


async def _run_tools(agent: Agent, calls: list[ToolCall], signal: AbortSignal) -> list[ToolResult]:
    results: list[ToolResult | None] = [None] * len(calls)
    index = 0
    while index < len(calls):
        tool = agent.tools.get(calls[index].name)
        end = index + 1
        if tool is not None and tool.concurrency_safe:
            while end < len(calls):
                nxt = agent.tools.get(calls[end].name)
                if nxt is None or not nxt.concurrency_safe:
                    break
                end += 1
        if end - index == 1:
            results[index] = await _run_tool(agent, calls[index], signal)
        else:
            async with anyio.create_task_group() as tg:
                for position in range(index, end):
                    tg.start_soon(_run_tool_into, agent, calls[position], signal, results, position)
        index = end
    return [r if r is not None else ToolResult("tool produced no result", True) for r in results]


async def _run_tool_into(
    agent: Agent, call: ToolCall, signal: AbortSignal, into: list[ToolResult | None], position: int
) -> None:
    into[position] = await _run_tool(agent, call, signal)


async def _run_tool(agent: Agent, call: ToolCall, signal: AbortSignal) -> ToolResult:
    if agent.tools.refusal is not None:
        return ToolResult(agent.tools.refusal, is_error=True)
    tool = agent.tools.get(call.name)
    if tool is None:
        available = ", ".join(agent.tools.names()) or "none"
        return ToolResult(
            f'unknown tool "{call.name}" (available tools: {available})', is_error=True
        )
    tracing = agent.ctx.tracing  # the tracing seam: hooks only when a tracer is installed
    traced = tracing.tool_call(agent, call) if tracing.enabled else None
    failure: Exception | None = None
    tool_signal, unlink = signal.linked()
    try:
        result = await tool.invoke(call.arguments, ToolContext(agent, call.id, tool_signal))
    except TurnBlocked as exc:
        agent._blocked = str(exc) or f"tool {call.name} blocked the turn"
        result, failure = ToolResult(f"blocked: {agent._blocked}", is_error=True), exc
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
