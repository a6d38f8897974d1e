"""A turn cut off by a stopped process, taken up again from the log.

A persisted session re-opened with ``ctx.agents.resume(..., cut_off_turn="continue")``
whose log ends inside a turn (a ``turn/start`` with no ``turn/end``: the process
died during it) keeps that turn open: the agent's first turn is its continuation
(:data:`CONTINUE`, queued ahead of any message), which writes ``turn/start`` again
with ``"resumed": true`` and the same turn number, then carries on from the log:

* tool calls of the last assistant message that have no ``tool/result`` run again
  (each was in flight: at least once), through the same path as any call (the
  tool's own gate, the tool tape, tracing); calls with a result are not run again;
* then the model is asked for the next step (a model call that was in flight is
  asked again: its request is the same history), and the turn ends as any turn;
* a log whose last step already ended the turn (an assistant message with no tool
  calls) ends it with that step's stop reason, asking nothing.

The agent loop (:class:`~dsh.core._turn.TurnLoop`) runs it; this module reads the log.
With ``cut_off_turn="abort"`` (the default of ``ctx.agents.resume``) the turn is closed
``aborted`` instead (:func:`close_cut_off_turn`): at most once for the step in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from dsh.core._llm import ModelError, ToolCall
from dsh.core._session import Event, Session

Ended = Literal["completed", "max-tokens", "refusal"]
"""The stop reason of a cut-off turn whose last step had already ended it."""

__all__ = [
    "CONTINUE",
    "CutOffTurn",
    "Ended",
    "close_cut_off_turn",
    "cut_off_tail",
    "unended_turn",
]

CutOffTurn = Literal["abort", "continue"]
"""What re-opening a session does with a turn its process stopped in: ``abort`` (close
it ``aborted``: at most once for the step in flight) or ``continue`` (take it up again:
at least once)."""

CONTINUE: dict[str, Any] = {}
"""The queue entry's ``extra`` (by identity) that makes a turn the continuation of the
cut-off turn instead of a new one."""

_ENDED: dict[str, Ended] = {
    "end": "completed",
    "max-tokens": "max-tokens",
    "refusal": "refusal",
}


def unended_turn(events: Sequence[Event]) -> int | None:
    """The number of the log's last turn if it started and never ended, else None."""
    for index in range(len(events) - 1, -1, -1):
        kind = events[index].type
        if kind == "turn/end":
            return None
        if kind == "turn/start":
            return int(events[index].data.get("turn", 0))
    return None


def close_cut_off_turn(session: Session) -> None:
    """Append ``turn/end`` (aborted) for a last turn that started but never ended."""
    turn = unended_turn(session.events)
    if turn is not None:
        session.append(
            "turn/end",
            {
                "turn": turn,
                "stop_reason": "aborted",
                "error": "the process stopped before this turn ended",
            },
        )


def cut_off_tail(events: Sequence[Event]) -> tuple[int, list[ToolCall], Ended | None]:
    """What the log says of its cut-off turn: the model calls it made, the tool calls
    of its last step that have no result, and the turn's stop reason when that step
    asked for no tool (None: the turn needs more steps)."""
    steps = 0
    last: int | None = None  # index of the turn's last assistant message
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        kind = event.type
        if kind == "assistant/message":
            steps += 1
            if last is None:
                last = index
        elif kind == "turn/start" and not event.data.get("resumed"):
            break
    if last is None:
        return steps, [], None
    calls: dict[str, ToolCall] = {}
    answered: set[str] = set()
    for event in events[last + 1 :]:
        data = event.data
        if event.type == "tool/call":
            call_id = str(data.get("id"))
            calls[call_id] = ToolCall(call_id, str(data.get("name")), data.get("arguments") or {})
        elif event.type == "tool/result":
            answered.add(str(data.get("call_id")))
    if not calls:
        stop = _ENDED.get(str(events[last].data.get("stop_reason", "end")))
        if stop is None:  # it asked for tools, and the process stopped before they were written
            raise ModelError("the process stopped before this step's tool calls were recorded")
        return steps, [], stop
    return steps, [c for i, c in calls.items() if i not in answered], None
