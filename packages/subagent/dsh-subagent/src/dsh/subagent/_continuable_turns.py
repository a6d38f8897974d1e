"""The turns of continuable children: their start/end events and settlement notices.

Each turn of a continuable child is a run on the bus (``subagent/start`` /
``subagent/end``, the run id is the child's id, ``turn`` counts) and ends with one
``subagent/continuable-settle`` event and one settlement notice to the live parent.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio

from dsh.core import AbortSignal, Content, last_output, text_of
from dsh.core.models import as_blocks
from dsh.core.sessions import Event
from dsh.subagent._continuable_record import ContinuableChild, diagnostic_for, status_for
from dsh.subagent._relay import turn_usage

if TYPE_CHECKING:
    from dsh.core import Agent, Context

__all__ = [
    "EVENT_CONTINUABLE_SETTLE",
    "EVENT_CONTINUABLE_START",
    "NOTICE_REPORT",
    "NOTICE_SETTLED",
    "message_text",
    "quoted",
    "settlement_text",
    "turn_settled",
    "turn_started",
    "wait_accepted",
]

_log = logging.getLogger("dsh.subagent._continuable")

EVENT_CONTINUABLE_START = "subagent/continuable-start"
"""Bus event (scoped to the parent): a continuable child accepted its first message."""
EVENT_CONTINUABLE_SETTLE = "subagent/continuable-settle"
"""Bus event (scoped to the parent): one turn of a continuable child settled."""
NOTICE_SETTLED = "subagent/settled"
"""``source.type`` of the settlement notice a parent receives."""
NOTICE_REPORT = "subagent/report"
"""``source.type`` of a report a parent receives."""


def turn_started(ctx: Context, record: ContinuableChild, agent: Agent, event: Event) -> None:
    """A turn of ``record``'s child started: it accepted its message; ``subagent/start``."""
    record.turn_start = event.seq
    if record.accepted is not None:
        record.accepted.set()
    ctx.events.emit("subagent/start", _run_event(record, agent), scope=record.parent_id)


def _run_event(record: ContinuableChild, agent: Agent) -> dict[str, Any]:
    """The shared ``subagent/start`` / ``subagent/end`` data: each turn of a
    continuable child is a run (the run id is the child's id; ``turn`` counts)."""
    return {
        "run_id": record.id,
        "provider": record.provider,
        "parent_agent": record.parent_id,
        "label": record.label,
        "depth": agent.depth,
        "continuable": True,
        "turn": record.turns + 1,
    }


def turn_settled(
    ctx: Context, record: ContinuableChild, agent: Agent, end: Event, *, quiet: bool
) -> None:
    """A turn of ``record``'s child ended with ``end``: update the record, emit the
    events, and (unless ``quiet``: the registry is draining) notify the live parent."""
    stop = str(end.data.get("stop_reason"))
    start = record.turn_start if record.turn_start >= 0 else end.seq
    record.turn_start = -1
    record.turns += 1
    record.stop_reason = stop
    record.last_status = status_for(stop)
    events = agent.session.events
    if end.seq != len(events) - 1:  # (the turn/end is the last event when observed)
        events = events[: end.seq + 1]
    record.last_output = last_output(events, start)
    record.diagnostic = diagnostic_for(stop, end.data.get("error"))
    data = {
        "agent_id": record.id,
        "status": record.last_status,
        "stop_reason": stop,
        "turn": record.turns,
    }
    bus = ctx.events
    if bus.has_listeners("subagent/end"):
        run = _run_event(record, agent)
        run["turn"] = record.turns
        run["stop_reason"] = stop
        run["diagnostic"] = record.diagnostic
        run["usage"] = turn_usage(agent.session.events, start, end.seq + 1)
        bus.emit("subagent/end", run, scope=record.parent_id)
    bus.emit(EVENT_CONTINUABLE_SETTLE, data, scope=record.parent_id)
    if record.draining or quiet or ctx.closing:
        return
    parent = ctx.agents.get(record.parent_id)
    if parent is None or parent.closed:
        return
    try:
        parent.notify(settlement_text(record), source={"type": NOTICE_SETTLED, **data})
    except Exception:
        _log.exception("could not notify the parent of subagent %s", record.id)


def settlement_text(record: ContinuableChild) -> str:
    """The settlement notice a parent reads when one turn of ``record`` settled."""
    who = f"subagent {record.id}{quoted(record.label)}"
    status = record.last_status
    if status == "settled":
        head = f"[runtime notice] {who} settled: its turn {record.turns} completed."
    elif status == "idle":
        head = f"[runtime notice] {who} was interrupted in its turn {record.turns}."
    else:
        head = (
            f"[runtime notice] {who} failed: its turn {record.turns} ended with stop reason"
            f" {record.stop_reason}."
        )
    lines = [head]
    if record.diagnostic and status != "settled":
        lines.append(f"Diagnostic: {record.diagnostic}")
    if record.last_output:
        lines.append(f"Final output:\n{record.last_output}")
    else:
        lines.append("Final output: (none)")
    lines.append("It keeps its conversation; continue it with send_message.")
    return "\n".join(lines)


def quoted(label: str | None) -> str:
    """`` ("label")`` for a label, else nothing."""
    return f' ("{label}")' if label else ""


def message_text(message: Content) -> str:
    """The text of a message (a string, or its text blocks)."""
    if isinstance(message, str):
        return message
    return text_of(as_blocks(message))


async def wait_accepted(record: ContinuableChild, signal: AbortSignal) -> bool:
    """Wait until ``record``'s child accepted its message (a turn started, or it
    closed); False if ``signal`` fired first."""
    event = record.accepted
    if event is None or event.is_set():
        return True
    with anyio.CancelScope() as scope:
        unlink = signal.on_abort(lambda _reason: scope.cancel())
        try:
            await event.wait()
        finally:
            unlink()
    return event.is_set()
