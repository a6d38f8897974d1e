"""The parent's journal of delegations: which it started and which it collected.

A delegation outlives its parent process (the workflow keeps running on the
workers), so a parent that restarts must know which run ids it still has to
collect. The journal is a JSONL file of ``{"op": "started" | "collected", "run":
ID, ...}`` lines, appended with one ``write`` each (``O_APPEND``), so parents that
share it never interleave half lines and a crash loses at most the line being
written. :meth:`DelegationJournal.outstanding` is started minus collected; a run is
collected once its result was handed over (or it was cancelled by this parent), so
a restarted parent that reconnects to what is outstanding receives each result once.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["DelegationJournal", "JournalEntry"]


class JournalEntry(dict[str, Any]):
    """One started delegation: ``run``, ``parent_session``, ``label``, ``provider``, ``at``."""


class DelegationJournal:
    """An append-only JSONL record of this parent's delegations (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()

    def started(
        self, run_id: str, *, parent_session: str | None, label: str | None, provider: str
    ) -> None:
        """Record a delegation this parent started."""
        self._append(
            {
                "op": "started",
                "run": run_id,
                "parent_session": parent_session,
                "label": label,
                "provider": provider,
                "at": time.time(),
            }
        )

    def collected(self, run_id: str, stop_reason: str) -> None:
        """Record that a delegation's result was handed over (or it was cancelled)."""
        self._append({"op": "collected", "run": run_id, "stop_reason": stop_reason})

    def outstanding(self, parent_session: str | None = None) -> list[JournalEntry]:
        """Delegations started and not collected (oldest first), optionally only
        those of ``parent_session``."""
        started: dict[str, JournalEntry] = {}
        for record in self._read():
            run = record.get("run")
            if not isinstance(run, str):
                continue
            if record.get("op") == "started":
                started[run] = JournalEntry(record)
            elif record.get("op") == "collected":
                started.pop(run, None)
        entries = list(started.values())
        if parent_session is not None:
            entries = [e for e in entries if e.get("parent_session") == parent_session]
        return entries

    def _append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    def _read(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        records: list[dict[str, Any]] = []
        for line in raw.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash
            if isinstance(record, dict):
                records.append(record)
        return records

    def __repr__(self) -> str:
        return f"<DelegationJournal {self.path}>"
