"""The plain view of ``dsh run`` when stdout is not a terminal (a pipe, a file, CI):
one line per start, tool call, refusal and end on stderr, indented by depth; the
answer alone on stdout; the usage last. A refused tool call and a delegation that
failed or could not start begin with ``✗``."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from dsh.cli._safe_text import strip_controls
from dsh.cli._tree import (
    DelegationTree,
    Node,
    describe_call,
    format_budget,
    format_elapsed,
    format_usage,
    short_id,
)
from dsh.cli._view import RunSummary, RunView, usage_line, who
from dsh.core import text_of
from dsh.core.sessions import Event
from dsh.subagent import SubagentProgress

__all__ = ["PlainView", "tree_lines"]


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
                print(f"lead: {strip_controls(text)}", file=self.err, flush=True)

    def _line(self, node: Node, text: str) -> None:
        indent = "  " * max(0, node.depth - 1)
        print(f"{indent}{strip_controls(text)}", file=self.err, flush=True)

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

    def refused(self, node: Node | None, tool: str, reason: str) -> None:
        indent = "  " * (node.depth if node is not None else 0)
        first = reason.splitlines()[0] if reason else tool
        print(f"{indent}✗ {strip_controls(f'{who(node)}: refused: {first}')}", file=self.err)

    def _ended_line(self, node: Node) -> None:
        details = [f"in {format_elapsed(node.elapsed())}"]
        usage = format_usage(node.usage, short=True)
        if usage:
            details.append(usage)
        budget = format_budget(node)
        if budget:
            details.append(budget)
        mark = "✗" if node.failed else "-"
        line = f"{mark} {node.title} {node.stop_reason} {', '.join(details)}"
        if node.diagnostic and node.stop_reason != "completed":
            line += f": {node.diagnostic.splitlines()[0][:200]}"
        self._line(node, line)

    def notice(self, text: str) -> None:
        print(strip_controls(text), file=self.err, flush=True)

    def finish(self, summary: RunSummary) -> None:
        if self.tree_at_end:
            print("\ndelegation tree:", file=self.err)
            for line in tree_lines(self.tree):
                print(strip_controls(line), file=self.err)
            print(file=self.err)
        if self.print_answer and summary.answer:
            print(strip_controls(summary.answer), file=self.out, flush=True)
        print(usage_line(summary), file=self.err, flush=True)

    def interrupted(self, summary: RunSummary | None = None) -> None:
        super().interrupted(summary)
        if summary is not None:
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
            budget = format_budget(node)
            if budget:
                details += f", {budget}"
            run = f"run {short_id(node.run_id)}, {where}depth {node.depth}"
            lines.append(f"{prefix}{branch}{node.title} ({run}) → {details}")
            add(node.children, prefix + indent)

    add(tree.roots, "")
    return lines
