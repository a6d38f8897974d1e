"""How ``dsh run`` and ``dsh demo`` show a run: three views of the same events.

* :class:`LiveView` — on a terminal: the lead's text streams, and a live tree of
  delegations (label, provider, state, elapsed, tokens, cost) updates in place
  below it (``rich``);
* :class:`PlainView` — when stdout is not a terminal: one plain progress line per
  start, tool call and end on stderr, the answer alone on stdout;
* :class:`JsonView` — ``--json``: every event as one JSON object per line on stdout.

A view is fed by :func:`dsh.cli._watch.watch` (the lead's events and the bus's
``subagent/*`` events) and told the outcome with :meth:`RunView.finish`; it never
touches the run itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from dsh.cli._tree import (
    DelegationTree,
    Node,
    describe_call,
    format_elapsed,
    format_usage,
    short_id,
)
from dsh.core import BusEvent, Event, text_of
from dsh.subagent import SubagentProgress, SubagentUsage, UsageReport

__all__ = [
    "JsonView",
    "LiveView",
    "PlainView",
    "RunSummary",
    "RunView",
    "discard_output",
    "usage_line",
]


@dataclass(frozen=True, slots=True)
class RunSummary:
    """How the run ended and what it cost."""

    answer: str
    stop_reason: str
    error: str | None
    lead_usage: SubagentUsage
    subagents: UsageReport

    @property
    def total(self) -> SubagentUsage:
        """The lead's own model usage plus every delegation below it."""
        return self.lead_usage + self.subagents.total

    @property
    def incomplete(self) -> bool:
        """True if some part of the total is unknown."""
        return self.total.incomplete


def usage_line(summary: RunSummary) -> str:
    """``usage: lead …; subagents … in N runs; total …`` (says ``incomplete`` when it is)."""
    runs = len(summary.subagents.runs)
    parts = [f"lead {format_usage(summary.lead_usage) or 'unknown'}"]
    if runs:
        plural = "run" if runs == 1 else "runs"
        parts.append(
            f"subagents {format_usage(summary.subagents.total) or 'unknown'} in {runs} {plural}"
        )
    parts.append(f"total {format_usage(summary.total) or 'unknown'}")
    line = "usage: " + "; ".join(parts)
    if summary.incomplete:
        line += " (incomplete: a model or transport reported no usage for part of the run)"
    return line


class RunView:
    """The events a view receives; the base keeps the :class:`DelegationTree`."""

    def __init__(self) -> None:
        self.tree = DelegationTree("")
        self.lead_tokens = SubagentUsage()
        self.lead_tools: dict[str, str] = {}
        """The lead's tool calls running now: call id → tool name."""
        self.lead_state = "starting"
        self.on_output_closed: Callable[[], None] = _nothing
        """Called once if the reader of stdout went away (``dsh run --json | head``)."""

    def begin(self, lead_id: str) -> None:
        """The lead exists; the run is about to start."""
        self.tree = DelegationTree(lead_id)

    def close(self) -> None:
        """Release the terminal (idempotent)."""

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
            self.lead_tools[str(data.get("id"))] = str(data.get("name", "tool"))
            self.lead_state = "tool"
        elif kind == "tool/result":
            self.lead_tools.pop(str(data.get("call_id")), None)
            if not self.lead_tools:
                self.lead_state = "thinking"
        elif kind == "turn/end":
            self.lead_state = str(data.get("stop_reason", "done"))
            self.lead_tools.clear()
        self.lead_event(event)

    def on_bus(self, event: BusEvent) -> None:
        """A ``subagent/start``, ``subagent/progress`` or ``subagent/end`` of the context."""
        data = event.data
        if event.type == "subagent/start":
            self.started(self.tree.start(data), data)
        elif event.type == "subagent/progress":
            item = data.get("item")
            if isinstance(item, SubagentProgress):
                node = self.tree.progress(str(data.get("run_id")), item)
                self.progressed(node, str(data.get("run_id")), item)
        elif event.type == "subagent/end":
            node = self.tree.end(data)
            if node is not None:
                self.ended(node, data)

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
        """A delegation ended."""

    def notice(self, text: str) -> None:
        """Something the user should know that is not the answer (waiting for jobs...)."""

    def say(self, text: str) -> None:
        """A line of narrative (the demo's ``user → lead: ...``)."""
        self.notice(text)

    def finish(self, summary: RunSummary) -> None:
        """The run is over: show the answer and the usage."""

    def interrupted(self) -> None:
        """The run was interrupted (Ctrl-C)."""

    @asynccontextmanager
    async def suspended(self) -> AsyncIterator[None]:
        """Hold the display still while the user answers a prompt."""
        yield


# -- the terminal view ---------------------------------------------------------------------

_STATE_STYLE = {"completed": "green", "queued": "dim", "running": "yellow"}


class LiveView(RunView):
    """The lead's text streaming, and below it a live tree of delegations (rich)."""

    def __init__(self, console: Console | None = None, *, refresh_per_second: float = 10) -> None:
        super().__init__()
        self.console = console or Console(highlight=False)
        self._partial = ""
        self._live: Live | None = None
        self._refresh = refresh_per_second
        self._started_at = time.monotonic()
        self._done = False

    def begin(self, lead_id: str) -> None:
        super().begin(lead_id)
        self._started_at = time.monotonic()
        self._start_live()

    def _start_live(self) -> None:
        if self._live is None:
            self._live = Live(
                get_renderable=self.render,
                console=self.console,
                refresh_per_second=self._refresh,
                transient=False,
            )
            self._live.start()

    def _stop_live(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def close(self) -> None:
        self._flush_partial()
        self._stop_live()

    # text --------------------------------------------------------------------------------

    def lead_text(self, text: str) -> None:
        if not text:
            return
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self.console.print(Text(line), soft_wrap=True)

    def lead_event(self, event: Event) -> None:
        if event.type == "assistant/message":
            self._flush_partial()

    def _flush_partial(self) -> None:
        if self._partial:
            partial, self._partial = self._partial, ""
            self.console.print(Text(partial), soft_wrap=True)

    def notice(self, text: str) -> None:
        self.console.print(Text(text, style="dim"))

    def say(self, text: str) -> None:
        self._flush_partial()
        self.console.print(Text(text))

    # the tree ------------------------------------------------------------------------------

    def render(self) -> RenderableType:
        """The current frame: the partial line of the lead's text, then the tree."""
        now = time.monotonic()
        tree = Tree(self._lead_label(now), guide_style="dim")
        for node in list(self.tree.roots):
            self._branch(tree, node, now)
        if self._partial:
            return Group(Text(self._partial), tree)
        return tree

    def _lead_label(self, now: float) -> Text:
        label = Text("lead", style="bold")
        state = self.lead_state
        if self._done:
            style = "green" if state == "completed" else "red"
            label.append(f"  {state}", style=style)
        elif state == "tool" and self.lead_tools:
            names = ", ".join(dict.fromkeys(list(self.lead_tools.values())))
            label.append(f"  running {names}", style="yellow")
        else:
            label.append(f"  {state}", style="yellow")
        label.append(f"  {format_elapsed(now - self._started_at)}", style="dim")
        tokens = format_usage(self.lead_tokens, short=True)
        if tokens:
            label.append(f"  {tokens}", style="dim")
        return label

    def _branch(self, parent: Tree, node: Node, now: float) -> None:
        branch = parent.add(self._node_label(node, now))
        for child in list(node.children):
            self._branch(branch, child, now)

    def _node_label(self, node: Node, now: float) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        if node.state == "done":
            ok = node.stop_reason == "completed"
            text.append("✓ " if ok else "✗ ", style="green" if ok else "red")
        elif node.state == "queued":
            text.append("◌ ", style="dim")
        else:
            text.append("● ", style="yellow")
        text.append(f"[{node.provider}]", style="cyan")
        if node.label:
            text.append(f" {node.label}", style="bold")
        if node.state == "done":
            reason = node.stop_reason or "error"
            text.append(f"  {reason}", style=_STATE_STYLE.get(reason, "red"))
        elif node.state == "queued":
            where = f" #{node.queue_position}" if node.queue_position else ""
            text.append(f"  queued{where}", style="dim")
        else:
            text.append("  running", style="yellow")
        text.append(f"  {format_elapsed(node.elapsed(now))}", style="dim")
        usage = format_usage(node.usage, short=True)
        if usage:
            text.append(f"  {usage}", style="dim")
        if node.state != "done" and node.activity:
            text.append(f"  → {node.activity}", style="magenta")
        elif node.state == "done" and node.diagnostic and node.stop_reason != "completed":
            text.append(f"  {node.diagnostic.splitlines()[0][:120]}", style="red")
        elif node.state == "done" and node.text.strip():
            excerpt = " ".join(node.text.split())
            text.append(f"  “{excerpt[:100]}”", style="dim italic")
        return text

    # the end -------------------------------------------------------------------------------

    def finish(self, summary: RunSummary) -> None:
        self._done = True
        self.lead_state = summary.stop_reason
        self._flush_partial()
        self._stop_live()
        style = "dim" if not summary.incomplete else "yellow"
        self.console.print(Text(usage_line(summary), style=style))

    def interrupted(self) -> None:
        self._done = True
        self.lead_state = "interrupted"
        self.close()

    @asynccontextmanager
    async def suspended(self) -> AsyncIterator[None]:
        self._flush_partial()
        was_live = self._live is not None
        self._stop_live()
        try:
            yield
        finally:
            if was_live and not self._done:
                self._start_live()


# -- plain lines -------------------------------------------------------------------------


class PlainView(RunView):
    """Plain progress lines on ``err`` (stderr); the answer alone on ``out`` (stdout).

    ``tree_at_end`` also prints the finished delegation tree, ``show_lead`` each of the
    lead's messages as it completes (the demo does both, on stdout).
    """

    def __init__(
        self,
        out: TextIO | None = None,
        err: TextIO | None = None,
        *,
        tree_at_end: bool = False,
        answer: bool = True,
        show_lead: bool = False,
    ) -> None:
        super().__init__()
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.tree_at_end = tree_at_end
        self.print_answer = answer
        self.show_lead = show_lead

    def lead_event(self, event: Event) -> None:
        if self.show_lead and event.type == "assistant/message":
            text = text_of(event.data.get("content"))
            if text:
                print(f"lead: {text}", file=self.err, flush=True)

    def _line(self, node: Node, text: str) -> None:
        indent = "  " * max(0, node.depth - 1)
        print(f"{indent}{text}", file=self.err, flush=True)

    def started(self, node: Node, data: Mapping[str, Any]) -> None:
        self._line(
            node, f"+ {node.title} started (run {short_id(node.run_id)}, depth {node.depth})"
        )

    def progressed(self, node: Node | None, run_id: str, item: SubagentProgress) -> None:
        if node is None:
            return
        if item.kind == "child_start" and item.path:
            self._line(
                node, f"+ {node.title} started (run {short_id(node.run_id)}, in another process)"
            )
        elif item.kind == "child_end" and item.path:
            self._ended_line(node)
        elif item.kind == "tool_call":
            self._line(node, f"  {node.title} → {describe_call(item)}")
        elif item.kind == "queued":
            where = f" (position {item.position})" if item.position else ""
            self._line(node, f"  {node.title} queued{where}")

    def ended(self, node: Node, data: Mapping[str, Any]) -> None:
        self._ended_line(node)

    def _ended_line(self, node: Node) -> None:
        details = [f"in {format_elapsed(node.elapsed())}"]
        usage = format_usage(node.usage, short=True)
        if usage:
            details.append(usage)
        line = f"- {node.title} {node.stop_reason} {', '.join(details)}"
        if node.diagnostic and node.stop_reason != "completed":
            line += f": {node.diagnostic.splitlines()[0][:200]}"
        self._line(node, line)

    def notice(self, text: str) -> None:
        print(text, file=self.err, flush=True)

    def finish(self, summary: RunSummary) -> None:
        if self.tree_at_end:
            print("\ndelegation tree:", file=self.err)
            for line in tree_lines(self.tree):
                print(line, file=self.err)
            print(file=self.err)
        if self.print_answer and summary.answer:
            print(summary.answer, file=self.out, flush=True)
        print(usage_line(summary), file=self.err, flush=True)


def tree_lines(tree: DelegationTree) -> list[str]:
    """The finished tree as plain text lines (``├─`` / ``└─``)."""
    lines = [f"lead (session {short_id(tree.lead_id)})"]

    def add(nodes: list[Node], prefix: str) -> None:
        for index, node in enumerate(nodes):
            last = index == len(nodes) - 1
            branch, indent = ("└─ ", "   ") if last else ("├─ ", "│  ")
            where = "another process, " if node.remote else ""
            details = f"{node.stop_reason or node.state} in {format_elapsed(node.elapsed())}"
            usage = format_usage(node.usage, short=True)
            if usage:
                details += f", {usage}"
            run = f"run {short_id(node.run_id)}, {where}depth {node.depth}"
            lines.append(f"{prefix}{branch}{node.title} ({run}) → {details}")
            add(node.children, prefix + indent)

    add(tree.roots, "")
    return lines


# -- JSON lines ----------------------------------------------------------------------------


class JsonView(RunView):
    """Every event as one JSON object per line on ``out`` (``dsh run --json``).

    ``{"type": "lead/text", "text"}`` per streamed delta of the lead;
    ``lead/tool_call`` and ``lead/tool_result``; ``subagent/start``,
    ``subagent/progress`` (``run_id``, ``item``) and ``subagent/end`` as on the bus;
    ``notice``; at the end ``answer`` then ``usage``. Every object has ``t``, the
    seconds since the run began.
    """

    def __init__(self, out: TextIO | None = None) -> None:
        super().__init__()
        self.out = out or sys.stdout
        self._t0 = time.monotonic()
        self._reader_gone = False

    def emit(self, kind: str, **fields: Any) -> None:
        """Write one event line (nothing more once the reader has gone away)."""
        if self._reader_gone:
            return
        record = {"type": kind, "t": round(time.monotonic() - self._t0, 4), **fields}
        try:
            self.out.write(json.dumps(record, ensure_ascii=False, default=_json_default) + "\n")
            self.out.flush()
        except BrokenPipeError:
            self._reader_gone = True
            discard_output(self.out)
            self.on_output_closed()

    def lead_text(self, text: str) -> None:
        if text:
            self.emit("lead/text", text=text)

    def lead_event(self, event: Event) -> None:
        data = event.data
        if event.type == "tool/call":
            self.emit(
                "lead/tool_call",
                id=data.get("id"),
                name=data.get("name"),
                arguments=data.get("arguments"),
            )
        elif event.type == "tool/result":
            self.emit(
                "lead/tool_result",
                call_id=data.get("call_id"),
                name=data.get("name"),
                is_error=bool(data.get("is_error")),
            )

    def on_bus(self, event: BusEvent) -> None:
        super().on_bus(event)
        data = dict(event.data)
        if event.type == "subagent/progress":
            item = data.get("item")
            if isinstance(item, SubagentProgress):
                data["item"] = item.to_json()
        elif event.type == "subagent/end":
            usage = data.get("usage")
            if isinstance(usage, SubagentUsage):
                data["usage"] = usage.to_json()
        self.emit(event.type, **data)

    def notice(self, text: str) -> None:
        self.emit("notice", text=text)

    def finish(self, summary: RunSummary) -> None:
        answer: dict[str, Any] = {"text": summary.answer, "stop_reason": summary.stop_reason}
        if summary.error:
            answer["error"] = summary.error
        self.emit("answer", **answer)
        self.emit(
            "usage",
            lead=summary.lead_usage.to_json(),
            subagents=summary.subagents.to_json(),
            total=summary.total.to_json(),
            incomplete=summary.incomplete,
        )

    def interrupted(self) -> None:
        self.emit("interrupted")


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


def _json_default(value: Any) -> Any:
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    return str(value)
