"""The terminal view of ``dsh run``: the lead's text streaming, and below it a live tree
of delegations redrawn in place (``rich``). Refusals and delegations that could not
start get a red line above the tree and a red mark in it; the last frame stays, with
every delegation that was still running shown ``interrupted`` after Ctrl-C, and the
usage follows either way."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from dsh.cli._safe_text import strip_controls
from dsh.cli._tree import NOT_STARTED, Node, format_budget, format_elapsed, format_usage
from dsh.cli._view import RunSummary, RunView, usage_line, who
from dsh.core.sessions import Event

__all__ = ["LiveView"]

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
        self._ended_at: float | None = None
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
            live.refresh()  # the last frame, as things are now
            live.stop()

    def close(self) -> None:
        self._flush_partial()
        self._stop_live()

    def _print(self, text: Text, *, soft_wrap: bool = False) -> None:
        """A line above the live tree. The tree below it is drawn fresh first: rich
        redraws, after each line, the frame of its last refresh — without this, a run
        shorter than one refresh interval shows its very first frame (``starting
        0 ms``) under every line until the end."""
        if self._live is not None:
            self._live.refresh()
        self.console.print(text, soft_wrap=soft_wrap)

    # text --------------------------------------------------------------------------------

    def lead_text(self, text: str) -> None:
        if not text:
            return
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._print(Text(strip_controls(line)), soft_wrap=True)

    def lead_event(self, event: Event) -> None:
        if event.type == "assistant/message":
            self._flush_partial()

    def _flush_partial(self) -> None:
        if self._partial:
            partial, self._partial = self._partial, ""
            self._print(Text(strip_controls(partial)), soft_wrap=True)

    def notice(self, text: str) -> None:
        self._print(Text(strip_controls(text), style="dim"))

    def say(self, text: str) -> None:
        self._flush_partial()
        self._print(Text(strip_controls(text)))

    def refused(self, node: Node | None, tool: str, reason: str) -> None:
        self._flush_partial()
        first = strip_controls(reason).splitlines()[0] if reason else tool
        self._print(Text(f"✗ {who(node)}: refused: {first}", style="red"))

    def ended(self, node: Node, data: Mapping[str, Any]) -> None:
        if node.stop_reason == NOT_STARTED:
            self._flush_partial()
            why = strip_controls(node.diagnostic or "").splitlines()
            self._print(
                Text(f"✗ {node.title} could not start: {why[0] if why else ''}", style="red")
            )

    # the tree ------------------------------------------------------------------------------

    def render(self) -> RenderableType:
        """The current frame: the partial line of the lead's text, then the tree."""
        now = self._ended_at if self._ended_at is not None else time.monotonic()
        tree = Tree(self._lead_label(now), guide_style="dim")
        for node in list(self.tree.roots):
            self._branch(tree, node, now)
        if self._partial:
            return Group(Text(strip_controls(self._partial)), tree)
        return tree

    def _lead_label(self, now: float) -> Text:
        label = Text("lead", style="bold")
        state = self.lead_state
        if self._done:
            style = "green" if state == "completed" else "red"
            label.append(f"  {state}", style=style)
        elif state == "tool" and self.lead_tools:
            names = ", ".join(dict.fromkeys(list(self.lead_tools.values())))
            label.append(f"  running {strip_controls(names)}", style="yellow")
        else:
            label.append(f"  {state}", style="yellow")
        label.append(f"  {format_elapsed(now - self._started_at)}", style="dim")
        tokens = format_usage(self.lead_tokens, short=True) if self.lead_tokens.total_tokens else ""
        if tokens:
            label.append(f"  {tokens}", style="dim")
        if self.lead_refused:
            label.append(f"  {_refused(self.lead_refused)}", style="red")
        return label

    def _branch(self, parent: Tree, node: Node, now: float) -> None:
        branch = parent.add(self._node_label(node, now))
        for child in list(node.children):
            self._branch(branch, child, now)

    def _node_label(self, node: Node, now: float) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        if node.state == "done" and node.stop_reason == "interrupted":
            text.append("■ ", style="yellow")
        elif node.state == "done":
            ok = node.stop_reason == "completed" and not node.refused
            text.append("✓ " if ok else "✗ ", style="green" if ok else "red")
        elif node.state == "queued":
            text.append("◌ ", style="dim")
        else:
            text.append("● ", style="yellow")
        text.append(f"[{strip_controls(node.provider)}]", style="cyan")
        if node.label:
            text.append(f" {strip_controls(node.label)}", style="bold")
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
        budget = format_budget(node, now)
        if budget:
            text.append(f"  {budget}", style="dim")
        if node.refused:
            text.append(f"  {_refused(node.refused)}", style="red")
        if node.state != "done" and node.activity:
            text.append(f"  → {strip_controls(node.activity)}", style="magenta")
        elif node.state == "done" and node.diagnostic and node.stop_reason != "completed":
            first = strip_controls(node.diagnostic).splitlines()[0][:120]
            text.append(f"  {first}", style="red")
        elif node.state == "done" and node.text.strip():
            excerpt = " ".join(strip_controls(node.text).split())
            text.append(f"  “{excerpt[:100]}”", style="dim italic")
        return text

    # the end -------------------------------------------------------------------------------

    def finish(self, summary: RunSummary) -> None:
        self._done = True
        self._ended_at = time.monotonic()
        self.lead_state = summary.stop_reason
        self._flush_partial()
        self._stop_live()
        style = "dim" if not summary.incomplete else "yellow"
        self._print(Text(usage_line(summary), style=style))

    def interrupted(self, summary: RunSummary | None = None) -> None:
        super().interrupted(summary)
        self._done = True
        self._ended_at = time.monotonic()
        self.close()
        if summary is not None:
            self._print(Text(usage_line(summary), style="dim"))

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


def _refused(tools: list[str]) -> str:
    names = ", ".join(strip_controls(name) for name in dict.fromkeys(tools))
    return f"{len(tools)} refused ({names})"
