"""Newline-delimited JSON-RPC framing, strict and bounded (stdlib only).

ACP over stdio is one JSON-RPC message per line. :class:`LineReader` reads lines
with a cap on their length (a line longer than the cap is discarded up to its
newline, and reported, so one runaway line cannot grow memory without bound);
:func:`classify` checks one decoded line against JSON-RPC 2.0 and says what it
is, or which error answers it. Both sides of dsh's ACP use them: the ``dsh acp``
server answers bad frames with -32700 / -32600, the ``acp`` provider fails the
run on them.

JSON text may hold a lone UTF-16 surrogate (``"\\ud800"``, or half an emoji cut
by a JavaScript client): :func:`json.loads` accepts it and gives a ``str`` that
cannot be encoded as UTF-8. :func:`encode_message` writes such strings as
``\\uXXXX`` escapes (so an id is echoed exactly), and :func:`scrub_surrogates`
replaces them with U+FFFD in content before it goes anywhere else.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "Frame",
    "LineReader",
    "OversizedLine",
    "classify",
    "encode_message",
    "error_response",
    "excerpt",
    "scrub_surrogates",
]

DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
"""Largest line accepted by default (16 MiB)."""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
"""The request was cancelled (``$/cancel_request``); ACP's and LSP's code."""

_EXCERPT = 160


class OversizedLine:
    """A line longer than the cap (its bytes were discarded)."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


class LineReader:
    """Lines from an ``asyncio.StreamReader``, each at most ``max_bytes`` long.

    :meth:`next` returns the line's bytes (without the newline), an
    :class:`OversizedLine` for a line beyond the cap, or None at EOF. A last line
    without a newline is returned at EOF like any other.
    """

    def __init__(self, reader: asyncio.StreamReader, max_bytes: int = DEFAULT_MAX_LINE_BYTES):
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self._reader = reader
        self.max_bytes = max_bytes
        self._buffer = bytearray()
        self._eof = False

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
                chunk = await self._reader.read(65536)
            except (ConnectionError, OSError):
                chunk = b""
            if not chunk:
                self._eof = True
            else:
                self._buffer += chunk


FrameKind = Literal["request", "notification", "response", "error"]


@dataclass(frozen=True, slots=True)
class Frame:
    """One classified line: ``kind`` and the ``message``; for ``error`` the
    ``reply`` that answers it (a JSON-RPC error response with id null or the id)."""

    kind: FrameKind
    message: dict[str, Any] | None = None
    reply: dict[str, Any] | None = None


def error_response(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def _valid_id(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int) and not isinstance(value, bool))
    )


def classify(line: bytes | OversizedLine, *, require_version: bool = False) -> Frame | None:
    """What one line is (None for a blank line, which is skipped).

    With ``require_version`` a message whose ``jsonrpc`` member is not exactly
    ``"2.0"`` is an error too (-32600, answered with the id of a request, else
    null): what a server owes its client. The ``acp`` provider reads agents
    leniently and leaves it off.
    """
    if isinstance(line, OversizedLine):
        return Frame(
            "error",
            reply=error_response(
                None, INVALID_REQUEST, f"message too large ({line.size} bytes on one line)"
            ),
        )
    stripped = line.strip()
    if not stripped:
        return None
    try:
        message = json.loads(stripped)
    except (ValueError, RecursionError):
        return Frame(
            "error", reply=error_response(None, PARSE_ERROR, f"parse error: {excerpt(stripped)}")
        )
    if isinstance(message, list):
        return Frame(
            "error",
            reply=error_response(None, INVALID_REQUEST, "batch requests are not supported"),
        )
    if not isinstance(message, dict):
        return Frame(
            "error",
            reply=error_response(
                None, INVALID_REQUEST, f"a message must be a JSON object, got {excerpt(stripped)}"
            ),
        )
    if _MAY_HOLD_SURROGATE.search(stripped):
        # content that cannot be encoded as UTF-8 must not reach a session or a model;
        # the id stays exact (a response echoes it)
        scrubbed = scrub_surrogates(message)
        if "id" in message:
            scrubbed["id"] = message["id"]
        message = scrubbed
    has_id = "id" in message
    request_id = message.get("id")
    if has_id and not _valid_id(request_id):
        return Frame(
            "error",
            reply=error_response(None, INVALID_REQUEST, "id must be a string or an integer"),
        )
    if require_version and message.get("jsonrpc") != "2.0":
        version = excerpt(json.dumps(message.get("jsonrpc"), ensure_ascii=True))
        return _invalid(
            message,
            has_id and "method" in message,
            f'jsonrpc must be "2.0", got {version if "jsonrpc" in message else "nothing"}',
        )
    if "method" in message:
        method = message["method"]
        if not isinstance(method, str) or not method:
            return _invalid(message, has_id, "method must be a non-empty string")
        params = message.get("params")
        if params is not None and not isinstance(params, dict | list):
            return _invalid(message, has_id, "params must be an object or an array")
        return Frame("request" if has_id else "notification", message)
    if has_id and ("result" in message) != ("error" in message):
        error = message.get("error")
        if "error" in message and not _error_object(error):
            return Frame("error", message, reply=None)
        return Frame("response", message)
    return _invalid(message, has_id, "not a request, notification or response")


def _invalid(message: dict[str, Any], has_id: bool, why: str) -> Frame:
    request_id = message.get("id") if has_id else None
    return Frame(
        "error",
        message,
        reply=error_response(request_id, INVALID_REQUEST, f"invalid request: {why}"),
    )


def _error_object(error: Any) -> bool:
    return (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and not isinstance(error.get("code"), bool)
        and isinstance(error.get("message"), str)
    )


def excerpt(data: bytes | str, limit: int = _EXCERPT) -> str:
    """A short, printable excerpt for diagnostics."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    cut = text[:limit]
    cut = "".join(ch if ch.isprintable() else "\N{REPLACEMENT CHARACTER}" for ch in cut)
    return cut + ("…" if len(text) > limit else "")


_SURROGATE = re.compile("[\ud800-\udfff]")
# what can decode to a lone surrogate: a \uD800-\uDFFF escape, or raw CESU-8 bytes
# (json.loads decodes bytes with "surrogatepass")
_MAY_HOLD_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


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
