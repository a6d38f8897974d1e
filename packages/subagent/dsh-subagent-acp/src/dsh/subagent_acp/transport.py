"""Strict newline-delimited JSON framing over the agent's stdio pipes.

acp's own stdio framing logs and skips lines that are not JSON, treats a
``null`` line as the end of the stream, lets a JSON line that is not an object
kill its receive loop, and reassembles lines of any length. A frame glued to a
banner (``"Loading... {..."``) is silently lost and the request it answered
hangs. This transport (an ``acp`` message-level ``Transport``: ``send`` /
``receive`` / ``close``) owns the framing instead: a line that is not a JSON
object, or longer than the cap, ends the stream at once and is recorded in
:attr:`StrictNdjsonTransport.violation`, so every pending request fails fast
and the run's diagnostic can say what the agent wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Literal

from dsh.subagent.diagnostics import redact_secrets

__all__ = ["StrictNdjsonTransport"]

_log = logging.getLogger("dsh.subagent_acp.transport")

_EXCERPT = 160


def excerpt(line: bytes) -> str:
    """A short, printable, secret-redacted excerpt of ``line`` for diagnostics."""
    text = line[:_EXCERPT].decode("utf-8", errors="replace")
    text = "".join(ch if ch.isprintable() else "\N{REPLACEMENT CHARACTER}" for ch in text)
    if len(line) > _EXCERPT:
        text += "…"
    return redact_secrets(text)


class StrictNdjsonTransport:
    """JSON-RPC messages as NDJSON over a ``StreamReader`` / ``StreamWriter`` pair."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_line_bytes: int,
        on_garbage: Literal["error", "skip"] = "error",
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max = max_line_bytes
        self._on_garbage = on_garbage
        self._lock = asyncio.Lock()
        self.violation: str | None = None
        """Why the stream was ended early (None: it was not)."""
        self.skipped = 0
        """Non-JSON lines skipped (``on_garbage = "skip"``)."""
        self.received = 0
        """Messages received."""

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message as a line."""
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with self._lock:
            self._writer.write(data)
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        """The next message; None at the end of the stream or after a violation."""
        if self.violation is not None:
            return None
        while True:
            line = await self._read_line()
            if line is None:
                return None
            if not line:
                return None  # EOF
            stripped = line.strip()
            if not stripped:
                continue
            try:
                message = json.loads(stripped)
            except ValueError:
                if self._on_garbage == "skip":
                    self.skipped += 1
                    _log.debug("skipping non-JSON line from the agent: %s", excerpt(stripped))
                    continue
                self._violate(f"a line that is not JSON: {excerpt(stripped)!r}")
                return None
            if not isinstance(message, dict):
                self._violate(f"a JSON line that is not an object: {excerpt(stripped)!r}")
                return None
            self.received += 1
            return message

    async def close(self) -> None:
        """Close the agent's stdin (the agent sees EOF)."""
        with contextlib.suppress(Exception):
            if not self._writer.is_closing():
                self._writer.close()

    def _violate(self, what: str) -> None:
        self.violation = (
            f"the agent wrote {what} to its stdout (ACP needs one JSON-RPC message per line)"
        )

    async def _read_line(self) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = await self._reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as exc:
                chunk = await self._reader.readexactly(exc.consumed)
                size += len(chunk)
                if size > self._max:
                    self._violate(f"a line longer than {self._max} bytes")
                    return None
                chunks.append(chunk)
                continue
            except asyncio.IncompleteReadError as exc:  # EOF, possibly mid-line
                chunks.append(exc.partial)
                return b"".join(chunks)
            except (ConnectionError, OSError):
                return b""
            size += len(chunk)
            if size > self._max:
                self._violate(f"a line longer than {self._max} bytes")
                return None
            chunks.append(chunk)
            return b"".join(chunks)
