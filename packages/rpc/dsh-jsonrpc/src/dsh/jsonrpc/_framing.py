"""Newline-delimited JSON framing, bounded (stdlib only).

One JSON-RPC message per line. :class:`LineReader` reads lines with a cap on their
length: a line longer than the cap is discarded up to its newline and reported as
an :class:`OversizedLine`, so one runaway line cannot grow memory without bound.

JSON text may hold a lone UTF-16 surrogate (``"\\ud800"``, or half an emoji cut by a
JavaScript peer): :func:`json.loads` accepts it and gives a ``str`` that cannot be
encoded as UTF-8. :func:`encode_message` writes such strings as ``\\uXXXX`` escapes
(so an id is echoed exactly), and :func:`scrub_surrogates` replaces them with U+FFFD
in content before it goes anywhere else.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "ByteReader",
    "LineReader",
    "OversizedLine",
    "encode_message",
    "excerpt",
    "scrub_surrogates",
]

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
"""Largest line accepted by default (16 MiB)."""

_CHUNK = 65536
_EXCERPT = 160


class ByteReader(Protocol):
    """Where lines come from: ``asyncio.StreamReader`` (``b""`` at end of input)."""

    async def read(self, n: int = -1, /) -> bytes:
        """At most ``n`` bytes; ``b""`` at end of input."""
        ...


class OversizedLine:
    """A line longer than the cap (its bytes were discarded)."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


class LineReader:
    """Lines from a :class:`ByteReader`, each at most ``max_bytes`` long.

    :meth:`next` returns the line's bytes (without the newline), an
    :class:`OversizedLine` for a line beyond the cap, or None at end of input. A
    last line without a newline is returned at the end like any other. A read that
    fails (``ConnectionError``, ``OSError``) ends the input; :attr:`read_error` says
    how.
    """

    def __init__(self, reader: ByteReader, max_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self._reader = reader
        self.max_bytes = max_bytes
        self._buffer = bytearray()
        self._eof = False
        self.read_error: str | None = None
        """Why reading failed (None: it did not, or the input just ended)."""

    async def next(self) -> bytes | OversizedLine | None:
        """The next line (see the class docstring)."""
        discarding = 0
        while True:
            index = self._buffer.find(b"\n")
            if index >= 0:
                line = bytes(self._buffer[:index])
                del self._buffer[: index + 1]
                if discarding or len(line) > self.max_bytes:
                    return OversizedLine(discarding + len(line))
                return line
            if len(self._buffer) > self.max_bytes:
                discarding += len(self._buffer)
                self._buffer.clear()
            if self._eof:
                if discarding:
                    discarding += len(self._buffer)
                    self._buffer.clear()
                    return OversizedLine(discarding)
                if self._buffer:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            try:
                chunk = await self._reader.read(_CHUNK)
            except (ConnectionError, OSError) as exc:
                self.read_error = f"{type(exc).__name__}: {exc}"
                chunk = b""
            if not chunk:
                self._eof = True
            else:
                self._buffer += chunk


def excerpt(data: bytes | str, limit: int = _EXCERPT) -> str:
    """A short, printable excerpt for diagnostics."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    cut = text[:limit]
    cut = "".join(ch if ch.isprintable() else "\N{REPLACEMENT CHARACTER}" for ch in cut)
    return cut + ("…" if len(text) > limit else "")


_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_surrogates(value: Any) -> Any:
    """``value`` (decoded JSON) with every lone surrogate in its strings, keys
    included, replaced by U+FFFD, so it can be encoded as UTF-8 anywhere.

    :func:`json.loads` joins an escaped surrogate *pair* into one character, so
    any surrogate left in a decoded string is a lone one.
    """
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub_surrogates(k): scrub_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_surrogates(item) for item in value]
    return value


def encode_message(message: Any) -> bytes:
    """``message`` as one NDJSON line: compact JSON, UTF-8, a newline.

    A string holding a lone surrogate (an id echoed back, a tool's undecodable
    output) is written as a ``\\uXXXX`` escape, which is valid JSON and valid
    UTF-8, instead of failing with :class:`UnicodeEncodeError`.
    """
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"
