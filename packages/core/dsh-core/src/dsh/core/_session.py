"""Sessions: append-only event logs with a header, persisted as JSONL.

Every event has ``seq`` equal to its index. The header holds the session id, the
``parent_session`` it descends from, ``created_at`` and ``meta`` (``cwd``,
``origin``, ``delegation_depth``, ``seed_length``, ...).

A session can start from a *seed*: a prefix of another session's events. The seed
is shared by reference (events are immutable), so seeding from a 100k-event
parent copies pointers, not events; on disk the child's header names the seed
source instead of repeating it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, overload

from dsh.core._jsonl import JsonlWriter, SessionError

__all__ = [
    "Event",
    "EventPrefix",
    "LoadedSession",
    "SeededLog",
    "Session",
    "SessionError",
    "SessionHeader",
    "SessionStore",
    "TornTail",
    "new_session_id",
]


class Event(NamedTuple):
    """One immutable entry of a session log. ``seq`` is its index in the log.

    (A named tuple: events are created on every append, and a frozen dataclass
    costs several times more to construct.)
    """

    seq: int
    type: str
    data: Mapping[str, Any]
    ts: float

    def to_json(self) -> dict[str, Any]:
        """The JSONL form of this event."""
        return {"seq": self.seq, "type": self.type, "ts": self.ts, "data": self.data}


@dataclass(slots=True)
class SessionHeader:
    """Identity and lineage of a session."""

    id: str
    parent_session: str | None = None
    created_at: float = field(default_factory=time.time)
    meta: dict[str, Any] = field(default_factory=dict)
    seed_from: str | None = None
    """Session id the seed prefix was taken from (None: no seed)."""

    def to_json(self) -> dict[str, Any]:
        """The JSONL form of this header (the first line of a session file)."""
        return {
            "kind": "header",
            "id": self.id,
            "parent_session": self.parent_session,
            "created_at": self.created_at,
            "meta": self.meta,
            "seed_from": self.seed_from,
        }


class _SessionIds:
    """32-hex-digit ids: 64 random bits per process, then a counter.

    Unique across processes sharing a store (the prefix is re-drawn after fork)
    and ~15x cheaper than ``uuid4()``, which reads the OS's random source per id.
    """

    def __init__(self) -> None:
        self.reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        self.prefix = os.urandom(8).hex()
        self.counter = itertools.count(int.from_bytes(os.urandom(4), "big"))

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter) & 0xFFFFFFFFFFFFFFFF:016x}"


_ids = _SessionIds()


def new_session_id() -> str:
    """A new unique session id (32 hex digits)."""
    return _ids.next()


EventSink = Callable[[Event], None]


class EventPrefix(Sequence[Event]):
    """The first ``length`` events of an append-only log, without copying them.

    Valid because logs only ever grow: the prefix of a log never changes.
    """

    __slots__ = ("_base", "_length")

    def __init__(self, base: Sequence[Event], length: int) -> None:
        if length > len(base):
            raise ValueError(f"prefix length {length} exceeds the log's {len(base)} events")
        self._base = base
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Event]: ...
    def __getitem__(self, index: int | slice) -> Event | Sequence[Event]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("event index out of range")
        return self._base[index]

    def __iter__(self) -> Iterator[Event]:
        return itertools.islice(self._base, self._length)


class SeededLog(Sequence[Event]):
    """A session's events: a shared seed prefix followed by the session's own events.

    Forking a 100k-event parent costs the same as forking a 10-event one: the
    seed is referenced, never copied.
    """

    __slots__ = ("_own", "_seed", "_seed_length")

    def __init__(self, seed: Sequence[Event]) -> None:
        self._seed = seed
        self._seed_length = len(seed)
        self._own: list[Event] = []

    def append(self, event: Event) -> None:
        """Append one of the session's own events."""
        self._own.append(event)

    def __len__(self) -> int:
        return self._seed_length + len(self._own)

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Event]: ...
    def __getitem__(self, index: int | slice) -> Event | Sequence[Event]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        seed_length = self._seed_length
        if index < 0:
            index += seed_length + len(self._own)
        if index >= seed_length:
            return self._own[index - seed_length]
        if index < 0:
            raise IndexError("event index out of range")
        return self._seed[index]

    def __iter__(self) -> Iterator[Event]:
        return itertools.chain(itertools.islice(self._seed, self._seed_length), self._own)

    def __reversed__(self) -> Iterator[Event]:
        return itertools.chain(
            reversed(self._own), reversed(EventPrefix(self._seed, self._seed_length))
        )


class Session:
    """An append-only event log.

    ``events`` is a read-only view; add to the log with :meth:`append` only.

    A persisted session's file always holds whole lines: an append the disk refuses
    (full, over quota, failing) leaves the file as it was and raises
    :class:`SessionError`; the event stays in the log in memory, :attr:`unsaved`
    counts it, and the next append (or :meth:`flush`) writes it first.
    """

    __slots__ = ("_events", "_last_turn_end", "_length", "_saved", "_writer", "header")

    def __init__(
        self,
        header: SessionHeader,
        seed: Sequence[Event] = (),
        *,
        writer: JsonlWriter | None = None,
    ) -> None:
        self.header = header
        self._writer = writer
        self._last_turn_end = -1
        if not seed:  # (a new session: no len() calls for an empty seed)
            self._events: list[Event] | SeededLog = []
            self._length = self._saved = 0
            return
        self._events = SeededLog(seed)
        self._length = self._saved = len(seed)  # events[:_saved] are in the file
        for index in range(self._length - 1, -1, -1):  # O(1) for a completed-turn prefix
            if seed[index].type == "turn/end":
                self._last_turn_end = index
                break

    @property
    def id(self) -> str:
        """The session id."""
        return self.header.id

    @property
    def events(self) -> Sequence[Event]:
        """The events so far (do not mutate)."""
        return self._events

    @property
    def persisted(self) -> bool:
        """True if appends are written to a JSONL file."""
        return self._writer is not None

    @property
    def unsaved(self) -> int:
        """Events in the log that a failed write left out of the file (0 normally)."""
        return len(self._events) - self._saved if self._writer is not None else 0

    def __len__(self) -> int:
        return len(self._events)

    def append(self, type: str, data: Mapping[str, Any]) -> Event:
        """Append an event; it is written to disk (if persisted) before returning.

        Raises :class:`SessionError` when the write fails: the file is left as it
        was, and the event (in the log all the same) is written by the next append
        or :meth:`flush`.
        """
        seq = self._length  # (kept, not len() per append)
        event = Event(seq, type, data, time.time())
        self._events.append(event)
        self._length = seq + 1
        if type == "turn/end":
            self._last_turn_end = seq
        writer = self._writer
        if writer is not None:
            if self._saved == seq:
                writer.write(event.to_json())
            else:
                writer.write_many([e.to_json() for e in self._events[self._saved :]])
            self._saved = seq + 1
        return event

    def flush(self) -> None:
        """Write the events a failed append left out of the file (a no-op when there
        are none); :class:`SessionError` if the disk still refuses them."""
        writer = self._writer
        if writer is not None and self._saved < len(self._events):
            writer.write_many([e.to_json() for e in self._events[self._saved :]])
            self._saved = len(self._events)

    def completed_prefix(self) -> Sequence[Event]:
        """Events up to and including the last ``turn/end`` (empty if none).

        A view sharing this log's events (O(1)); it never changes, as logs only grow.
        """
        if self._last_turn_end < 0:
            return ()
        return EventPrefix(self._events, self._last_turn_end + 1)

    def close(self) -> None:
        """Stop writing to disk (after one last try at writing unsaved events).
        Idempotent."""
        if self._writer is not None:
            with contextlib.suppress(SessionError):
                self.flush()
            self._writer.close()
            self._writer = None


@dataclass(frozen=True, slots=True)
class TornTail:
    """An incomplete last line found when loading (an append interrupted by a crash)."""

    offset: int
    """Byte offset where the torn line starts."""
    length: int
    """Bytes in the torn line."""


@dataclass(frozen=True, slots=True)
class LoadedSession:
    """The result of :meth:`SessionStore.load`."""

    header: SessionHeader
    events: Sequence[Event]
    torn_tail: TornTail | None
    """Set when the file ended in a partial line; every complete event was loaded."""


class SessionStore:
    """A directory of JSONL session files, one per session (``<id>.jsonl``)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def path_for(self, session_id: str) -> Path:
        """The file holding ``session_id``."""
        if not session_id or "/" in session_id or session_id.startswith("."):
            raise SessionError(f"invalid session id {session_id!r}")
        return self.directory / f"{session_id}.jsonl"

    def exists(self, session_id: str) -> bool:
        """True if a file for ``session_id`` exists."""
        return self.path_for(session_id).exists()

    def ids(self) -> list[str]:
        """Ids of every stored session, oldest file first."""
        files = sorted(self.directory.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
        return [p.stem for p in files]

    def create(self, header: SessionHeader, seed: Sequence[Event] = ()) -> Session:
        """Create a new persisted session.

        A seed taken from a session stored here is written as a reference
        (``seed_from`` + ``meta.seed_length``); any other seed is written inline.
        """
        path = self.path_for(header.id)
        if path.exists():
            raise SessionError(f"session {header.id!r} already exists at {path}")
        writer = JsonlWriter(path, new=True)
        try:
            by_reference = (
                bool(seed) and header.seed_from is not None and self.exists(header.seed_from)
            )
            if seed and not by_reference:
                header.seed_from = None
            records = [header.to_json()]
            if seed and not by_reference:
                records.extend(event.to_json() for event in seed)
            writer.write_many(records)  # the header (and an inline seed) whole, or no file
        except BaseException:
            writer.close()
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        return Session(header, seed, writer=writer)

    def load(self, session_id: str) -> LoadedSession:
        """Load a session: every complete event, plus a report of a torn tail."""
        return self._load(session_id, depth=0)

    def resume(self, session_id: str) -> tuple[Session, TornTail | None]:
        """Load a session for appending: a torn tail is cut off first."""
        loaded = self.load(session_id)
        path = self.path_for(session_id)
        if loaded.torn_tail is not None:
            with open(path, "r+b") as handle:
                handle.truncate(loaded.torn_tail.offset)
        return Session(loaded.header, loaded.events, writer=JsonlWriter(path)), loaded.torn_tail

    def _load(self, session_id: str, depth: int) -> LoadedSession:
        if depth > 64:
            raise SessionError(f"seed chain of session {session_id!r} is too deep (cycle?)")
        path = self.path_for(session_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise SessionError(f"no stored session {session_id!r} in {self.directory}") from None
        header: SessionHeader | None = None
        events: list[Event] = []
        torn: TornTail | None = None
        offset = 0
        line_no = 0
        while offset < len(raw):
            end = raw.find(b"\n", offset)
            complete = end != -1
            chunk = raw[offset : end if complete else len(raw)]
            line_no += 1
            try:
                record = json.loads(chunk)
                if not isinstance(record, dict):
                    raise ValueError("not an object")
            except ValueError:
                if not complete:
                    torn = TornTail(offset, len(raw) - offset)
                    break
                raise SessionError(
                    f"{path}: line {line_no} is not a JSON object (corrupt session file)"
                ) from None
            if not complete:
                # A parseable line without its newline is still a torn append.
                torn = TornTail(offset, len(raw) - offset)
                break
            if header is None:
                if record.get("kind") != "header":
                    raise SessionError(f"{path}: first line is not a session header")
                header = SessionHeader(
                    id=str(record["id"]),
                    parent_session=record.get("parent_session"),
                    created_at=float(record.get("created_at", 0.0)),
                    meta=dict(record.get("meta") or {}),
                    seed_from=record.get("seed_from"),
                )
                if header.seed_from is not None:
                    parent = self._load(header.seed_from, depth + 1)
                    length = int(header.meta.get("seed_length", 0))
                    if length > len(parent.events):
                        raise SessionError(
                            f"{path}: seed_length {length} exceeds the {len(parent.events)}"
                            f" events of seed session {header.seed_from!r}"
                        )
                    events.extend(parent.events[:length])
            else:
                seq = record.get("seq")
                if seq != len(events):
                    raise SessionError(
                        f"{path}: line {line_no} has seq {seq!r}, expected {len(events)}"
                    )
                events.append(
                    Event(seq, str(record["type"]), record.get("data") or {}, record.get("ts", 0.0))
                )
            offset = end + 1
        if header is None:
            raise SessionError(f"{path}: no session header (empty or torn file)")
        return LoadedSession(header, events, torn)
