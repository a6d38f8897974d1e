"""How ``dsh run`` and ``dsh demo`` show a run: three views of the same events.

* :class:`~dsh.cli._live_view.LiveView` — on a terminal: the lead's text streams,
  and a live tree of delegations (label, provider, state, elapsed, tokens, cost)
  updates in place below it (``rich``);
* :class:`~dsh.cli._plain_view.PlainView` — when stdout is not a terminal: one plain
  progress line per start, tool call, refusal and end on stderr, the answer alone on
  stdout;
* :class:`~dsh.cli._json_view.JsonView` — ``--json``: every event as one JSON object
  per line on stdout.

This module holds what they share: :class:`RunView`, which folds the events into the
:class:`~dsh.cli._tree.DelegationTree` and counts what went wrong (refused tool
calls, delegations that failed or could not start: :meth:`RunView.problems`), and
:class:`RunSummary` with its :func:`usage_line`. A view is fed by
:func:`dsh.cli._watch.watch` (the lead's events, the bus's ``subagent/*`` and
``permission/refused`` events) and told the outcome with :meth:`RunView.finish`; it
never touches the run itself.

Whatever came from a model, a tool or a child (streamed text, the answer, labels,
tool names and titles, diagnostics, notices) goes through
:func:`~dsh.cli._safe_text.strip_controls` before it reaches the terminal — the
answer on a piped stdout too (``| cat`` still ends at a terminal). ``--json`` is JSON,
escaped already, and left as it is.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from dsh.cli._tree import DelegationTree, Node, format_usage
from dsh.core import BusEvent, text_of
from dsh.core.permissions import PERMISSION_REFUSED
from dsh.core.sessions import Event
from dsh.subagent import SubagentProgress, SubagentUsage, UsageReport

__all__ = ["START_FAILED", "RunSummary", "RunView", "discard_output", "usage_line"]

START_FAILED = "subagent could not start"
"""How the ``subagent`` tools' result begins when a delegation could not start (no run
exists then, so no ``subagent/start`` either; see dsh-tool-subagent)."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    """How the run ended and what it cost."""

    answer: str
    stop_reason: str
    error: str | None
    lead_usage: SubagentUsage
    subagents: UsageReport
    unpriced: bool = False
    """Some model call used tokens that no price is known for (the cost is partial,
    or unknown)."""

    @property
    def total(self) -> SubagentUsage:
        """The lead's own model usage plus every delegation below it."""
        return self.lead_usage + self.subagents.total

    @property
    def incomplete(self) -> bool:
        """True if some part of the total is unknown."""
        return self.total.incomplete


def usage_line(summary: RunSummary) -> str:
    """``usage: lead …; subagents … in N runs; total …`` (says ``incomplete`` when it
    is, and ``cost unknown`` once when some tokens have no price)."""
    runs = len(summary.subagents.runs)
    parts = [f"lead {format_usage(summary.lead_usage) or 'unknown'}"]
    if runs:
        plural = "run" if runs == 1 else "runs"
        parts.append(
            f"subagents {format_usage(summary.subagents.total) or 'unknown'} in {runs} {plural}"
        )
    parts.append(f"total {format_usage(summary.total) or 'unknown'}")
    if summary.unpriced:
        known = summary.total.cost_usd is not None
        parts.append("cost unknown for part of the run" if known else "cost unknown")
    line = "usage: " + "; ".join(parts)
    if summary.incomplete:
        line += " (incomplete: a model or transport reported no usage for part of the run)"
    return line


class RunView:
    """The events a view receives; the base keeps the :class:`DelegationTree` and
    what went wrong."""

    def __init__(self) -> None:
        self.tree = DelegationTree("")
        self.lead_tokens = SubagentUsage()
        self.lead_tools: dict[str, str] = {}
        """The lead's tool calls running now: call id → tool name."""
        self.lead_state = "starting"
        self.lead_refused: list[str] = []
        """The lead's tool calls the permission policy refused (tool names)."""
        self.refusals = 0
        """Refused tool calls, the lead's and every in-process child's."""
        self.on_output_closed: Callable[[], None] = _nothing
        """Called once if the reader of stdout went away (``dsh run --json | head``)."""
        self._calls: dict[str, tuple[str, Any]] = {}

    def begin(self, lead_id: str) -> None:
        """The lead exists; the run is about to start."""
        self.tree = DelegationTree(lead_id)

    def close(self) -> None:
        """Release the terminal (idempotent)."""

    def problems(self) -> str | None:
        """What went wrong, for the exit status (``1 tool call refused, 1 delegation
        failed``), or None."""
        failed = sum(1 for node in self.tree.walk() if node.failed)
        parts = []
        if self.refusals:
            parts.append(f"{self.refusals} tool call{'s' if self.refusals > 1 else ''} refused")
        if failed:
            parts.append(f"{failed} delegation{'s' if failed > 1 else ''} failed")
        return ", ".join(parts) or None

    def on_lead_event(self, event: Event) -> None:
        """An event of the lead's session (``assistant/delta`` for streamed text)."""
        kind = event.type
        data = event.data
        if kind == "assistant/delta":
            self.lead_state = "writing"
            self.lead_text(str(data.get("text", "")))
        elif kind == "turn/start":
            self.lead_state = "thinking"
        elif kind == "assistant/message":
            usage = data.get("usage")
            if usage:
                self.lead_tokens = self.lead_tokens + SubagentUsage.from_json(usage)
            self.lead_state = "thinking"
        elif kind == "tool/call":
            name = str(data.get("name", "tool"))
            self.lead_tools[str(data.get("id"))] = name
            self._calls[f"lead/{data.get('id')}"] = (name, data.get("arguments"))
            self.lead_state = "tool"
        elif kind == "tool/result":
            self.lead_tools.pop(str(data.get("call_id")), None)
            call = self._calls.pop(f"lead/{data.get('call_id')}", None)
            if data.get("is_error"):
                self._not_started(None, f"lead/{data.get('call_id')}", call, data.get("content"))
            if not self.lead_tools:
                self.lead_state = "thinking"
        elif kind == "turn/end":
            self.lead_state = str(data.get("stop_reason", "done"))
            self.lead_tools.clear()
        self.lead_event(event)

    def on_bus(self, event: BusEvent) -> None:
        """A ``subagent/start``, ``subagent/progress``, ``subagent/end`` or
        ``permission/refused`` of the context."""
        data = event.data
        if event.type == "subagent/start":
            self.started(self.tree.start(data), data)
        elif event.type == "subagent/progress":
            item = data.get("item")
            if isinstance(item, SubagentProgress):
                node = self.tree.progress(str(data.get("run_id")), item)
                self.progressed(node, str(data.get("run_id")), item)
                if node is not None:
                    self._child_call(node, item)
        elif event.type == "subagent/end":
            node = self.tree.end(data)
            if node is not None:
                self.ended(node, data)
        elif event.type == PERMISSION_REFUSED:
            self.refusals += 1
            found = self.tree.nodes.get(str(data.get("agent")))
            tool = str(data.get("tool") or "tool")
            (found.refused if found is not None else self.lead_refused).append(tool)
            self.refused(found, tool, str(data.get("reason") or f"{tool} was refused"))

    def _child_call(self, node: Node, item: SubagentProgress) -> None:
        """A child's tool call, and its result: a delegation of its own that could not
        start becomes a failed node under it."""
        key = f"{node.run_id}/{item.tool_call_id}"
        if item.kind == "tool_call":
            self._calls[key] = (item.name or "tool", item.arguments)
        elif item.kind == "tool_update" and item.status in ("completed", "failed"):
            call = self._calls.pop(key, None)
            if item.status == "failed":
                self._not_started(node, key, call, item.text)

    def _not_started(
        self, parent: Node | None, key: str, call: tuple[str, Any] | None, content: Any
    ) -> None:
        text = content if isinstance(content, str) else text_of(content)
        if not text or not text.startswith(START_FAILED):
            return
        name, arguments = call if call is not None else ("subagent", None)
        label = arguments.get("description") if isinstance(arguments, Mapping) else None
        why = text[len(START_FAILED) :].lstrip(": ").strip() or text
        node = self.tree.not_started(parent, key, name, str(label) if label else None, why)
        self.ended(node, {})

    # -- what subclasses show -------------------------------------------------------------

    def lead_text(self, text: str) -> None:
        """A delta of the lead's streamed text."""

    def lead_event(self, event: Event) -> None:
        """Any event of the lead (after the base has noted it)."""

    def started(self, node: Node, data: Mapping[str, Any]) -> None:
        """A delegation started."""

    def progressed(self, node: Node | None, run_id: str, item: SubagentProgress) -> None:
        """A progress item arrived (``node`` is the one it is about, if known)."""

    def ended(self, node: Node, data: Mapping[str, Any]) -> None:
        """A delegation ended (or could not start: ``data`` empty)."""

    def refused(self, node: Node | None, tool: str, reason: str) -> None:
        """A tool call of ``node`` (None: the lead) was refused by the permissions."""

    def notice(self, text: str) -> None:
        """Something the user should know that is not the answer (waiting for jobs...)."""

    def say(self, text: str) -> None:
        """A line of narrative (the demo's ``user → lead: ...``)."""
        self.notice(text)

    def finish(self, summary: RunSummary) -> None:
        """The run is over: show the answer and the usage."""

    def interrupted(self, summary: RunSummary | None = None) -> None:
        """The run was interrupted (Ctrl-C): every delegation still running is marked
        ``interrupted``; a view shows the usage of ``summary`` as well."""
        self.lead_state = "interrupted"
        self.tree.interrupt()

    @asynccontextmanager
    async def suspended(self) -> AsyncIterator[None]:
        """Hold the display still while the user answers a prompt."""
        yield


def who(node: Node | None) -> str:
    """``lead`` or the node's title, for a line about it."""
    return node.title if node is not None else "lead"


def _nothing() -> None:
    return None


def discard_output(out: TextIO) -> None:
    """Point ``out``'s descriptor at /dev/null, so that nothing written or flushed to
    it later (at interpreter exit too) raises again."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
