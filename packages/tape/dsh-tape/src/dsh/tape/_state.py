"""A tape's state while it is in use: the writer, the recorded calls, the matching.

:class:`TapeState` is what both ways into a tape share — the proxy's HTTP routes (for
the other processes of a tree) and the in-process paths (:class:`dsh.tape.TapeTransport`
for this process's model, the proxy's :meth:`~dsh.tape.TapeProxy.tool_tape` for its
agents' tool calls): one file descriptor, one ``seq`` counter, one book of recorded
calls, all behind one lock, so lines written from the proxy's thread and from the
agents' thread never mix and are numbered in the order they were written.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dsh.tape._format import (
    FORMAT_VERSION,
    TAPE_FILE,
    Divergence,
    TapeError,
    call_number,
    canonical,
    conversation_key,
    match_key,
    pretty,
    read_tape,
    redact_path,
    redact_text,
    similarity,
    to_json,
    unified_diff,
)
from dsh.tape._http import error_value
from dsh.tape._normalise import Normalisation, answer_to_tape, normalised
from dsh.tape._normalise import answer_from_tape as replayed_answer
from dsh.tape._tools import ToolBook, tool_line_text

__all__ = ["Answer", "Mode", "TapeState"]

Mode = Literal["record", "replay", "resume"]


@dataclass(frozen=True, slots=True)
class Answer:
    """What a model request is answered with from the tape: status, body, content type."""

    status: int
    body: bytes
    content_type: str


class TapeState:
    """The tape of a :class:`~dsh.tape.TapeProxy` (see the module); thread-safe."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        mode: Mode,
        *,
        meta: Mapping[str, Any] | None = None,
        replay_tools: bool = False,
        normalise: Normalisation | None = None,
    ) -> None:
        if mode not in ("record", "replay", "resume"):
            raise ValueError(f'mode must be "record", "replay" or "resume", not {mode!r}')
        self.directory = Path(directory)
        """The tape directory (the tape is its ``tape.jsonl``)."""
        self.mode: Mode = mode
        self.header: dict[str, Any] = {}
        """The tape's header line: the one written (record) or read (replay)."""
        self.divergence: Divergence | None = None
        """Replay mode: the first request the tape did not hold (None: none yet)."""
        self.recorded = 0
        """Exchanges written (record mode)."""
        self.replayed = 0
        """Requests answered from the tape (replay mode)."""
        self.replay_tools = replay_tools
        """Replay mode: answer tool calls from the tape (else they run again)."""
        self.tools = ToolBook()
        """The recorded tool calls (replay and resume modes)."""
        self.tools_recorded = 0
        """Tool calls written (record and resume modes)."""
        self.normalise = normalise
        """What of a request changes legitimately between runs (a temporary folder, the
        date): rewritten before a request is written or matched (:class:`Normalisation`)."""
        self._meta = dict(meta or {})
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._seq = 0
        self._index: dict[tuple[str, str, str, str], deque[dict[str, Any]]] = {}
        self._unused: list[dict[str, Any]] = []

    @property
    def tape_path(self) -> Path:
        """``<directory>/tape.jsonl``."""
        return self.directory / TAPE_FILE

    @property
    def remaining(self) -> int:
        """Replay mode: recorded exchanges not answered yet."""
        return len(self._unused)

    # -- opening and closing ----------------------------------------------------------

    def _open_tape(self) -> None:
        """Read the tape (replay, resume) and open it for appending (record, resume)."""
        if self.mode == "replay":
            self._load()
        elif self.mode == "resume":
            if self.tape_path.exists():
                self._load()
            self._open_for_recording()
        else:
            self._open_for_recording()

    def _close_tape(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _open_for_recording(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.tape_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise TapeError(f"cannot write the tape {self.tape_path}: {exc.strerror}") from None
        created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        header = {"tape": FORMAT_VERSION, "created": created, **self._meta}
        if self.mode == "resume":
            header["resumed"] = True
            self.header = {**header, **self.header}  # the first recording's meta wins
        else:
            self.header = header
        self._write(to_json(header))

    def _write(self, line: str) -> None:
        """One line, one write (``O_APPEND``: lines of concurrent writers never mix)."""
        data = (line + "\n").encode()
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def _load(self) -> None:
        tape = read_tape(self.directory)
        self.header = tape.header
        self.tools = ToolBook(tape.tools)
        for entry in tape.exchanges:
            key = self._key(entry["label"], entry["method"], entry["path"], entry.get("request"))
            self._index.setdefault(key, deque()).append(entry)
            self._unused.append(entry)

    @staticmethod
    def _key(label: str, method: str, path: str, request: Any) -> tuple[str, str, str, str]:
        return (label, method, path, match_key(request))

    # -- model exchanges -------------------------------------------------------------

    def record_exchange(
        self,
        label: str,
        method: str,
        rest: str,
        request: Any,
        status: int,
        content_type: str,
        body: bytes,
    ) -> None:
        """Write the line of an exchange whose answer was passed on whole (``request``
        is the parsed, redacted body: :func:`~dsh.tape._format.parse_body`; normalised
        here)."""
        request = normalised(self.normalise, request)
        answer = answer_to_tape(self.normalise, body.decode("utf-8", "replace"))
        fields = {
            "label": label,
            "method": method,
            "path": redact_path(rest),
            "request": request,
            "status": status,
            "content_type": content_type,
            "body": redact_text(answer),
            "conversation": conversation_key(request),
            "call": call_number(request),
        }
        with self._lock:
            if self._fd is None:
                return  # closed meanwhile: the step is not on the tape (at least once)
            self._seq += 1
            entry = {"v": FORMAT_VERSION, "seq": self._seq, **fields}
            line = to_json(entry)
            self._write(line)
            self.recorded += 1

    def answer_from_tape(
        self, label: str, method: str, rest: str, request: Any, *, resuming: bool = False
    ) -> Answer | None:
        """The recorded answer of a model request (``request`` parsed as recorded,
        normalised here); else, resuming, None (go live), else HTTP 409 with the
        divergence (the first one is kept as :attr:`divergence`)."""
        request = normalised(self.normalise, request)
        path = redact_path(rest)
        key = self._key(label, method, path, request)
        with self._lock:
            queue = self._index.get(key)
            if queue:
                entry = queue.popleft()
                self._unused.remove(entry)
                self.replayed += 1
                body = replayed_answer(self.normalise, str(entry.get("body") or "")).encode()
                content_type = str(entry.get("content_type") or "application/octet-stream")
                return Answer(int(entry["status"]), body, content_type)
            if resuming:
                return None
            divergence = self._diverge(label, method, path, request)
            if self.divergence is None:
                self.divergence = divergence
        value = error_value(409, "tape_divergence", divergence.describe())
        return Answer(409, json.dumps(value, ensure_ascii=False).encode(), "application/json")

    def _diverge(self, label: str, method: str, path: str, value: Any) -> Divergence:
        conversation, call = conversation_key(value), call_number(value)
        candidates = [
            e
            for e in self._unused
            if e["label"] == label and e["method"] == method and e["path"] == path
        ]
        same = [e for e in candidates if e.get("conversation") == conversation]
        same_call = [e for e in same if e.get("call") == call]
        closest: dict[str, Any] | None = None
        if same_call:
            closest = same_call[0]
        elif candidates:
            text = pretty(canonical(value))
            pool = same or candidates
            closest = max(pool, key=lambda e: similarity(pretty(canonical(e.get("request"))), text))
        if closest is None:
            return Divergence(label, path, conversation, call, "")
        diff = unified_diff(closest.get("request"), value)
        return Divergence(label, path, conversation, call, diff, closest_seq=closest.get("seq"))

    # -- tool calls ------------------------------------------------------------------

    def tool_call(self, call: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The tool route (``{"phase": "call"}`` before a tool runs, ``{"phase":
        "result"}`` after; see :mod:`dsh.core.tapes`): the status and JSON answer. The
        proxy's ``/t/tools`` route and the in-process :meth:`~dsh.tape.TapeProxy.tool_tape`
        both call it. A ``TypeError`` (a value JSON cannot hold) leaves the tape as it
        was."""
        if call.get("phase") == "result":
            with self._lock:
                if self._fd is not None:
                    text = tool_line_text(self._seq + 1, FORMAT_VERSION, call)
                    self._seq += 1
                    self._write(text)
                    self.tools_recorded += 1
            return 200, {"ok": True}
        if self.mode == "record":
            return 200, {"action": "record", "mode": "record"}
        if self.mode == "replay" and self.header.get("tape") == 1:
            return 200, {"action": "run"}  # a version 1 tape holds no tool calls
        with self._lock:
            found = self.tools.take(call)
            if found is not None:
                if self.mode == "resume" or self.replay_tools:
                    return 200, {"action": "result", "result": found.get("result") or {}}
                return 200, {"action": "run"}
            if self.mode == "resume":
                return 200, {"action": "record"}
            divergence = self.tools.diverge(call)
            if self.divergence is None:
                self.divergence = divergence
        return 409, error_value(409, "tape_divergence", divergence.describe())
