"""A bounded tail of what a child wrote to stderr."""

from __future__ import annotations

import asyncio
import re

from dsh.subagent.kit import redact_secrets

__all__ = ["StderrTail"]

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves...
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, DCS...: titles, hyperlinks
    r"|\x1b[ -/]*[0-~]?"  # the rest (charset selection...), or a lone ESC
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""Control characters other than tab and newline (carriage returns become newlines)."""


def _clean(text: str) -> str:
    text = _ESCAPES.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub("", text)


class StderrTail:
    """Keeps the last ``limit`` bytes written to a stream (bounded memory)."""

    __slots__ = ("_buffer", "_dropped", "limit")

    def __init__(self, limit: int = 16384) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._dropped = 0

    @property
    def position(self) -> int:
        """Bytes fed so far: pass it to :meth:`text` later as ``since`` to get only what
        came after (a pooled process serves many runs; each wants its own lines)."""
        return self._dropped + len(self._buffer)

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

    def text(self, max_chars: int = 2000, *, since: int = 0) -> str:
        """The tail as text: terminal escapes and control characters removed, secrets
        redacted, at most ``max_chars`` characters (plus a leading ``…`` when cut).
        With ``since`` (a :attr:`position`), only what was fed after it.

        Redaction runs before any cut (a cut can take away what makes a secret look
        like one), and a cut keeps whole lines where it can: the first line of a tail
        whose older bytes were dropped is partial, so it goes too."""
        start = since - self._dropped
        if start > 0:
            text = self._buffer[start:].decode("utf-8", errors="replace")
            cut = False
        else:
            text = self._buffer.decode("utf-8", errors="replace")
            cut = self._dropped > since
        if cut:
            newline = text.find("\n")
            if newline >= 0:
                text = text[newline + 1 :]
        text = redact_secrets(_clean(text)).strip()
        if len(text) > max_chars:
            text = text[-max_chars:]
            newline = text.find("\n")
            if 0 <= newline < len(text) - 1:
                text = text[newline + 1 :]
            cut = True
        return "…" + text if cut and text else text
