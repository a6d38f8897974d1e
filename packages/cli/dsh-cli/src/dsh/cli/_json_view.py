"""The ``--json`` view of ``dsh run``: every event as one JSON object per line on
stdout (the table is in docs/watching.md)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from dsh.cli._tree import Node
from dsh.cli._view import RunSummary, RunView, discard_output
from dsh.core import BusEvent
from dsh.core.sessions import Event
from dsh.subagent import SubagentProgress, SubagentUsage

__all__ = ["JsonView"]


class JsonView(RunView):
    """Every event as one JSON object per line on ``out`` (``dsh run --json``).

    ``{"type": "lead/text", "text"}`` per streamed delta of the lead;
    ``lead/tool_call`` and ``lead/tool_result``; ``subagent/start``,
    ``subagent/progress`` (``run_id``, ``item``), ``subagent/end`` and
    ``permission/refused`` as on the bus; ``subagent/not_started`` for a delegation
    that could not start; ``notice``; at the end ``answer`` then ``usage``. Every
    object has ``t``, the seconds since the run began.
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
            cost_unknown=summary.unpriced,
        )

    def ended(self, node: Node, data: Mapping[str, Any]) -> None:
        if not data:  # could not start: no subagent/end will say so
            self.emit(
                "subagent/not_started",
                provider=node.provider,
                label=node.label,
                diagnostic=node.diagnostic,
            )

    def interrupted(self, summary: RunSummary | None = None) -> None:
        super().interrupted(summary)
        self.emit("interrupted")


def _json_default(value: Any) -> Any:
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    return str(value)
