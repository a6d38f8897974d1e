"""Live progress across Temporal: the worker's side (:class:`ProgressWindow`) and the
parent's (:class:`ProgressReader`).

The channel is the activity's heartbeat details. The worker heartbeats anyway (that
is how it learns of a cancel and how Temporal learns it is alive); each heartbeat
carries the last progress items, numbered, the running usage and what the
delegation spent against its budget's caps (both with the earlier attempts' added:
see :mod:`._budget`). Temporal keeps only the latest details of a running activity,
outside the workflow history, and hands them to whoever describes the workflow (and
to the next attempt): a parent that listens, or meters a budget, polls
``DescribeWorkflowExecution`` and emits the items it has not seen. So progress costs
no history events, needs no store of its own, and reaches the parent about one
heartbeat interval plus one poll interval after it happened. A parent that falls
further behind than the window loses the oldest items (reported as a ``notice`` with
the count), as a slow ``run.progress()`` subscriber does.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Any

from dsh.subagent import BudgetMeter, SubagentProgress, SubagentUsage
from dsh.subagent_temporal._budget import Earlier, heartbeat_spend

__all__ = ["ProgressReader", "ProgressWindow"]

WINDOW_ITEMS = 128
"""Items a heartbeat carries at most."""
WINDOW_BYTES = 16 * 1024
"""JSON bytes a heartbeat's items take at most (the newest are kept): a batch's
running activities are described together, so this bounds that answer too."""
TAIL_BYTES = 8 * 1024
"""JSON bytes of items the outcome carries (what the last heartbeats may have missed)."""
ITEM_BYTES = 4 * 1024
"""JSON bytes of one item at most: longer text is cut (the output has all of it),
longer tool arguments are replaced by a note."""
_MERGEABLE = ("text", "thinking")


class ProgressWindow:
    """The worker's numbered window of a run's latest progress items."""

    def __init__(self, attempt: int, worker: str, earlier: Earlier | None = None) -> None:
        self.attempt = attempt
        self.earlier = earlier or Earlier()
        """What the attempts before this one spent (added to what this one reports)."""
        self.meter: BudgetMeter | None = None
        """The child's budget meter (an in-process child under a budget), while it runs."""
        self.worker = worker
        self.seq = 0
        self._items: deque[tuple[int, dict[str, Any], int]] = deque()
        self._bytes = 0
        self._sealed = 0
        """Items up to this seq went out in a heartbeat: they are never merged into."""
        self.usage: dict[str, Any] | None = None
        self.child: str | None = None

    def add(self, item: SubagentProgress) -> None:
        """Take one item (consecutive text or thinking deltas merge until sent)."""
        if item.kind == "usage" and item.usage is not None:
            self.usage = item.usage.to_json()
        data = _bounded(item.to_json())
        items = self._items
        if items and data["kind"] in _MERGEABLE:
            seq, last, size = items[-1]
            if (
                seq > self._sealed
                and size < ITEM_BYTES
                and last["kind"] == data["kind"]
                and last["path"] == data["path"]
            ):
                merged = dict(last)
                merged["text"] = (last.get("text") or "") + (data.get("text") or "")
                merged = _bounded(merged)
                new_size = _size(merged)
                items[-1] = (seq, merged, new_size)
                self._bytes += new_size - size
                self._trim()
                return
        self.seq += 1
        size = _size(data)
        items.append((self.seq, data, size))
        self._bytes += size
        self._trim()

    def _trim(self) -> None:
        items = self._items
        while len(items) > 1 and (len(items) > WINDOW_ITEMS or self._bytes > WINDOW_BYTES):
            self._bytes -= items.popleft()[2]

    def details(self) -> dict[str, Any]:
        """The heartbeat details: ``{"attempt", "worker", "seq", "items", "usage",
        "spent", "child"}`` (``usage`` and ``spent``: every attempt's so far)."""
        self._sealed = self.seq
        own = SubagentUsage.from_json(self.usage) if self.usage else None
        usage = self.earlier.plus(own)
        return {
            "attempt": self.attempt,
            "worker": self.worker,
            "seq": self.seq,
            "items": [{"seq": seq, "item": data} for seq, data, _ in self._items],
            "usage": usage.to_json() if usage is not None else None,
            "spent": heartbeat_spend(self.earlier, self.meter, own),
            "child": self.child,
        }

    def tail(self) -> list[dict[str, Any]]:
        """The newest items within :data:`TAIL_BYTES`, for the outcome."""
        out: list[dict[str, Any]] = []
        total = 0
        for seq, data, size in reversed(self._items):
            total += size + 24  # with its {"seq", "item"} wrapper
            if out and total > TAIL_BYTES:
                break
            out.append({"seq": seq, "item": data})
        out.reverse()
        return out


def _size(data: dict[str, Any]) -> int:
    return len(json.dumps(data, separators=(",", ":"), default=str))


def _bounded(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` within :data:`ITEM_BYTES` (text cut, large fields replaced)."""
    if _size(data) <= ITEM_BYTES:
        return data
    data = dict(data)
    for key in ("arguments", "title"):
        if key in data and _size({key: data[key]}) > ITEM_BYTES // 4:
            data[key] = f"[{key} omitted: {_size({key: data[key]})} bytes]"
    text = data.get("text")
    if isinstance(text, str):
        room = max(ITEM_BYTES - _size({**data, "text": ""}) - 64, 0)
        if len(text.encode()) > room:
            data["text"] = text.encode()[:room].decode(errors="ignore") + " [cut]"
    return data


class ProgressReader:
    """The parent's side: feed it heartbeat details (or an outcome's tail); it emits
    each item once, in order, and keeps the running usage."""

    def __init__(self) -> None:
        self.attempt = 0
        self.worker = ""
        self.seen = 0
        self.dropped = 0
        self.usage: SubagentUsage | None = None

    def feed(
        self,
        attempt: int,
        worker: str,
        items: list[dict[str, Any]],
        usage: dict[str, Any] | None,
        emit: Callable[[SubagentProgress], None] | None,
    ) -> None:
        """Take what a heartbeat (or the outcome) carried; call ``emit`` for new items."""
        if attempt != self.attempt:
            first = self.attempt == 0
            self.attempt, self.seen = attempt, 0
            self.worker = worker
            if emit is not None:
                where = f"worker {worker}" if worker else "a worker"
                text = (
                    f"running on {where}"
                    if first and attempt <= 1
                    else f"attempt {attempt} running on {where} (the previous attempt's"
                    " worker was lost or failed; the child starts again)"
                )
                emit(SubagentProgress("notice", text=text))
        if usage:
            self.usage = SubagentUsage.from_json(usage)
        fresh = [entry for entry in items if _seq(entry) > self.seen]
        if not fresh:
            return
        first_seq = _seq(fresh[0])
        if self.seen and first_seq > self.seen + 1:
            missed = first_seq - self.seen - 1
            self.dropped += missed
            if emit is not None:
                emit(
                    SubagentProgress(
                        "notice",
                        text=f"{missed} progress item(s) of this run were not delivered"
                        " (the parent polled less often than they came)",
                    )
                )
        for entry in fresh:
            self.seen = _seq(entry)
            if emit is None:
                continue
            data = entry.get("item")
            if not isinstance(data, dict):
                continue
            try:
                item = SubagentProgress.from_json(data)
            except ValueError:
                continue
            emit(item)


def _seq(entry: dict[str, Any]) -> int:
    seq = entry.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0
