"""The record of one continuable child, and reading its state back from a log.

A continuable child is a durable child session plus at most one live
activation (an :class:`~dsh.core.Agent`). Two bookkeeping events make it
recoverable from disk alone, so a parent process that restarted can list and
resume its children:

* ``subagent/continuable`` in the child's own log: how to re-activate it (the
  provider, label, persona, tool filter, agent options and depth limit it was
  started with; a resumed child never gains scope);
* ``subagent/child`` in the parent's log: that the parent started it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from dsh.core import AbortSignal, Content, last_output
from dsh.core.lifecycle import Disposer
from dsh.core.sessions import Event
from dsh.subagent._diagnostics import cap_diagnostic
from dsh.subagent._types import SubagentStartRequest, ToolFilter

if TYPE_CHECKING:
    from dsh.core import Agent
    from dsh.subagent._activation_lock import ActivationLock

__all__ = [
    "CHILD_EVENT",
    "SPEC_EVENT",
    "ContinuableChild",
    "ContinuableStatus",
    "find_spec",
    "request_from_spec",
    "spec_for",
]

SPEC_EVENT = "subagent/continuable"
"""Bookkeeping event in the child's log: how to re-activate it."""
CHILD_EVENT = "subagent/child"
"""Bookkeeping event in the parent's log: the parent started this continuable child."""

ContinuableStatus = Literal["idle", "running", "settled", "failed"]
"""``running``: a turn runs or is queued to. ``settled``: its last turn completed;
it waits for a message. ``failed``: its last turn ended in an error (or its
session cannot be read). ``idle``: no turn finished yet, or the last one was
interrupted or cut off; it waits for a message."""

_STATUS_BY_STOP = {"completed": "settled", "aborted": "idle"}


def status_for(stop_reason: str) -> ContinuableStatus:
    """The waiting status after a turn that ended with ``stop_reason``."""
    found = _STATUS_BY_STOP.get(stop_reason)
    return "settled" if found == "settled" else "idle" if found == "idle" else "failed"


@dataclass(eq=False)
class ContinuableChild:
    """One continuable child: identity, the state of its last turn, its live activation.

    ``status`` is ``running`` while the activation runs a turn; otherwise the
    status its last turn left (see :data:`ContinuableStatus`). ``last_output`` is
    the final output of its last turn; ``diagnostic`` says what went wrong, if
    anything (also: why its session cannot be read).
    """

    id: str
    provider: str
    parent_id: str
    label: str | None = None
    depth: int = 1
    last_status: ContinuableStatus = "idle"
    last_output: str = ""
    diagnostic: str | None = None
    stop_reason: str | None = None
    turns: int = 0
    """Turns this child has finished (its own; a fork's seed does not count)."""
    agent: Agent | None = None
    """The live activation, or None (resumable from its persisted session)."""
    draining: bool = False
    """True while its activation is being shut down (its parent or context closing)."""
    readable: bool = True
    """False when its session could not be read (``diagnostic`` says why)."""
    spec: Mapping[str, Any] = field(default_factory=dict, repr=False)
    turn_start: int = field(default=-1, repr=False)
    lock: ActivationLock | None = field(default=None, repr=False)
    detach: list[Disposer] = field(default_factory=list, repr=False)
    released: asyncio.Event | None = field(default=None, repr=False)
    accepted: asyncio.Event | None = field(default=None, repr=False)

    @property
    def status(self) -> ContinuableStatus:
        """``running`` while a turn runs, else the status the last turn left."""
        agent = self.agent
        if agent is not None and agent.running:
            return "running"
        return self.last_status

    @property
    def live(self) -> bool:
        """True while the child has a live activation."""
        return self.agent is not None and not self.agent.closed

    @property
    def queued(self) -> int:
        """Messages waiting for a turn in the live activation (kept over an interrupt)."""
        return self.agent.queued if self.agent is not None else 0

    def summary(self, *, head: int = 300) -> dict[str, Any]:
        """A JSON-able description (what ``list_agents`` returns as data)."""
        output = self.last_output
        info: dict[str, Any] = {
            "agent_id": self.id,
            "parent_id": self.parent_id,
            "label": self.label,
            "provider": self.provider,
            "depth": self.depth,
            "status": self.status,
            "live": self.live,
            "turns": self.turns,
            "last_output_head": output if len(output) <= head else output[:head] + "…",
        }
        if self.queued:
            info["queued"] = self.queued
        if self.stop_reason is not None:
            info["stop_reason"] = self.stop_reason
        if self.diagnostic:
            info["diagnostic"] = self.diagnostic
        return info

    def refresh_from(self, events: Sequence[Event], seed_length: int) -> None:
        """Set the last-turn fields from a log (its own events start at ``seed_length``)."""
        turns = 0
        last_end: int | None = None
        cut_off: int | None = None
        for index in range(len(events) - 1, seed_length - 1, -1):
            kind = events[index].type
            if kind == "turn/end":
                turns += 1
                if last_end is None and cut_off is None:
                    last_end = index
            elif kind == "turn/start" and last_end is None and cut_off is None:
                cut_off = index
        self.turns = turns
        if last_end is not None:
            end = events[last_end].data
            start = _turn_start_before(events, last_end, seed_length)
            stop = str(end.get("stop_reason"))
            self.stop_reason = stop
            self.last_status = status_for(stop)
            self.last_output = last_output(events, start)
            self.diagnostic = diagnostic_for(stop, end.get("error"))
        elif cut_off is not None:
            turn = events[cut_off].data.get("turn", "?")
            self.last_status = "idle"
            self.diagnostic = f"its turn {turn} was cut off when its process stopped"


def _turn_start_before(events: Sequence[Event], end: int, floor: int) -> int:
    for index in range(end, floor - 1, -1):
        if events[index].type == "turn/start":
            return index
    return floor


def diagnostic_for(stop_reason: str, error: object) -> str | None:
    """Safe text for a turn's end (None for a clean completion)."""
    if error is None:
        return None if stop_reason == "completed" else f"turn ended: {stop_reason}"
    text = f"blocked: {error}" if stop_reason == "blocked" else str(error)
    return cap_diagnostic(text)


def spec_for(request: SubagentStartRequest, provider: str, agent_id: str) -> dict[str, Any]:
    """The ``subagent/continuable`` record for a child started with ``request``."""
    flt = request.tool_filter
    return {
        "agent_id": agent_id,
        "provider": provider,
        "parent_agent": request.parent.id,
        "label": request.label,
        "persona": request.persona,
        "tool_filter": None
        if flt is None
        else {"allow": list(flt.allow) if flt.allow is not None else None, "deny": list(flt.deny)},
        "agent_options": dict(request.agent_options) if request.agent_options else None,
        "max_depth": request.max_depth,
    }


def find_spec(events: Sequence[Event], agent_id: str, start: int = 0) -> Mapping[str, Any] | None:
    """The ``subagent/continuable`` record of ``agent_id`` in its log, or None."""
    for index in range(start, len(events)):
        event = events[index]
        if event.type == SPEC_EVENT and event.data.get("agent_id") == agent_id:
            return event.data
    return None


def request_from_spec(
    spec: Mapping[str, Any], parent: Agent, signal: AbortSignal, prompt: Content
) -> SubagentStartRequest:
    """The start request that re-activates a child with the scope it was started with."""
    raw_filter = spec.get("tool_filter")
    flt = None
    if isinstance(raw_filter, Mapping):
        allow = raw_filter.get("allow")
        flt = ToolFilter(
            allow=tuple(allow) if allow is not None else None,
            deny=tuple(raw_filter.get("deny") or ()),
        )
    options = spec.get("agent_options")
    max_depth = spec.get("max_depth")
    return SubagentStartRequest(
        prompt,
        parent,
        signal,
        label=spec.get("label"),
        agent_options=dict(options) if isinstance(options, Mapping) else None,
        max_depth=max_depth if isinstance(max_depth, int) else None,
        tool_filter=flt,
        persona=spec.get("persona"),
    )
