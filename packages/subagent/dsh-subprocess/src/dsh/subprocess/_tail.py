"""A bounded tail of what a child wrote to stderr."""

from __future__ import annotations

import asyncio
import re

from dsh.subagent.kit import redact_secrets

__all__ = ["StderrTail"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


class StderrTail:
    """Keeps the last ``limit`` bytes written to a stream (bounded memory)."""

    __slots__ = ("_buffer", "_dropped", "limit")

    def __init__(self, limit: int = 16384) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._dropped = 0

    def feed(self, data: bytes) -> None:
        """Append ``data``, dropping the oldest bytes beyond the limit."""
        self._buffer += data
        excess = len(self._buffer) - self.limit
        if excess > 0:
            del self._buffer[:excess]
            self._dropped += excess

    async def pump(self, stream: asyncio.StreamReader) -> None:
        """Read ``stream`` until EOF."""
        while True:
            try:
                chunk = await stream.read(65536)
            except (ConnectionError, OSError):
                return
            if not chunk:
                return
            self.feed(chunk)

    def text(self, max_chars: int = 2000) -> str:
        """The tail as text: terminal escapes removed, secrets redacted, at most
        ``max_chars`` characters."""
        text = _ANSI.sub("", self._buffer.decode("utf-8", errors="replace")).strip()
        if len(text) > max_chars:
            text = "…" + text[-max_chars:]
        elif self._dropped:
            text = "…" + text
        return redact_secrets(text)
