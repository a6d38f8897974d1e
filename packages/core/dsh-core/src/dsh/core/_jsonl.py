"""Session files: whole JSON lines appended to an O_APPEND file descriptor, or nothing
(the writer behind :class:`~dsh.core.SessionStore`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dsh.core._errors import DshError

__all__ = ["JsonlWriter", "SessionError"]


class SessionError(DshError):
    """A session could not be created, written or loaded."""


class JsonlWriter:
    """Appends whole JSON lines to an O_APPEND fd, or nothing.

    A crash can only tear the line being written; earlier lines stay intact. A write
    the disk refuses (ENOSPC, EDQUOT, EIO), after part of it or none, is cut back
    (``ftruncate``) so the file ends where it did, and raises :class:`SessionError`.
    """

    __slots__ = ("_cut_to", "_fd", "_new", "path")

    def __init__(self, path: Path, *, new: bool = False) -> None:
        self.path = path
        self._new = new  # not a line written yet: a refusal removes the file (create)
        self._cut_to: int | None = None  # a failed cut-back to retry before the next write
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_EXCL if new else 0)
        try:
            self._fd: int | None = os.open(path, flags, 0o600)
        except FileExistsError:
            raise SessionError(f"session file {path} already exists") from None
        except OSError as exc:
            raise SessionError(f"cannot open session file {path}: {_reason(exc)}") from None

    def write(self, record: Mapping[str, Any]) -> None:
        """Append ``record`` as one line (whole, or nothing and :class:`SessionError`)."""
        self._write(_line(record))

    def write_many(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Append ``records`` in one write: all of them, or none."""
        self._write(b"".join(_line(record) for record in records))

    def _write(self, data: bytes) -> None:
        fd = self._fd
        if fd is None:
            raise SessionError(f"session file {self.path} is closed")
        if self._cut_to is not None:
            self._cut_back(fd, self._cut_to, None)
        written = 0
        try:
            written = os.write(fd, data)
            while written < len(data):  # a short write: the disk filled up midway
                written += os.write(fd, memoryview(data)[written:])
        except OSError as exc:
            # O_APPEND and one writer per file: this call's bytes are the last ``written``
            end = os.fstat(fd).st_size - written if written else None
            if end is not None:
                self._cut_back(fd, end, exc)
            raise self._refused(exc) from None
        self._new = False

    def _cut_back(self, fd: int, end: int, cause: OSError | None) -> None:
        try:
            os.ftruncate(fd, end)
        except OSError as exc:
            self._cut_to = end
            reason = _reason(cause or exc)
            raise SessionError(
                f"{reason} while saving session {self.path.stem} to {self.path}, and its"
                f" unfinished last line could not be removed ({_reason(exc)}); loading the"
                " session cuts it off"
            ) from None
        self._cut_to = None

    def _refused(self, exc: OSError) -> SessionError:
        if self._new:
            return SessionError(
                f"{_reason(exc)} while creating session {self.path.stem} at {self.path};"
                " no session file was left behind"
            )
        return SessionError(
            f"{_reason(exc)} while saving session {self.path.stem} to {self.path}; the"
            " session file was left as it was (the next write saves what is missing once"
            " the disk has room)"
        )

    def close(self) -> None:
        """Close the file (idempotent); later writes raise :class:`SessionError`."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _line(record: Mapping[str, Any]) -> bytes:
    line = json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"
    try:
        return line.encode()
    except UnicodeEncodeError:  # a lone surrogate: \uXXXX escapes are valid UTF-8
        return (json.dumps(record, separators=(",", ":"), ensure_ascii=True) + "\n").encode()


def _reason(exc: OSError) -> str:
    """``no space left on device`` for ENOSPC, and so on."""
    text = os.strerror(exc.errno) if exc.errno else str(exc)
    return text[:1].lower() + text[1:]
