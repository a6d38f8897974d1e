"""The proxy's HTTP/1.1 server side, on asyncio streams: read a request, write a
response (whole, or chunked as it arrives). Stdlib only; enough HTTP for model API
clients (``content-length`` and chunked request bodies, keep-alive)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from dsh.tape._format import TapeError

__all__ = [
    "HEAD_LIMIT",
    "HOP_HEADERS",
    "PASS_BACK",
    "BadRequest",
    "Request",
    "error_body",
    "error_value",
    "head_bytes",
    "read_request",
    "write_chunk",
    "write_whole",
]

HOP_HEADERS = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "content-length",
        "te",
        "trailer",
        "upgrade",
        "accept-encoding",
    }
)
"""Request headers not forwarded upstream: hop-by-hop ones, and what httpx sets itself."""

PASS_BACK = ("retry-after", "x-request-id", "request-id")
"""Response headers passed back to the client besides ``content-type``."""

HEAD_LIMIT = 64 * 1024
"""The largest request head accepted (the stream reader's limit)."""


class BadRequest(TapeError):
    """The bytes on the wire are no HTTP/1.1 request this server reads (answered 400)."""


@dataclass
class Request:
    """One request as received: the target keeps its query string; header names keep
    their case (for forwarding), looked up in any case with :meth:`header`."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)

    @property
    def keep_alive(self) -> bool:
        """May the connection serve another request after this one?"""
        return (self.header("connection") or "").lower() != "close"


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """Read one request; None when the peer closed between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadRequest("the connection closed inside a request head") from None
    except asyncio.LimitOverrunError:
        raise BadRequest("request head too large") from None
    lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"bad request line: {lines[0][:100]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(f"bad header line: {line[:100]!r}")
        headers.append((name.strip(), value.strip()))
    request = Request(parts[0].upper(), parts[1], headers, b"")
    if "chunked" in (request.header("transfer-encoding") or "").lower():
        request.body = await _read_chunked(reader)
    else:
        try:
            size = int(request.header("content-length") or "0")
        except ValueError:
            raise BadRequest("bad content-length") from None
        request.body = await reader.readexactly(size) if size else b""
    return request


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";")[0].strip(), 16)
        except ValueError:
            raise BadRequest("bad chunk size") from None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return bytes(body)
        body += (await reader.readexactly(size + 2))[:-2]


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def head_bytes(
    status: int,
    headers: Sequence[tuple[str, str]],
    *,
    keep_alive: bool,
    length: int | None = None,
) -> bytes:
    """The status line and headers: a ``content-length`` when ``length`` is given, else
    a chunked body follows (:func:`write_chunk`)."""
    lines = [f"HTTP/1.1 {status} {_reason(status)}", *(f"{k}: {v}" for k, v in headers)]
    lines.append("connection: keep-alive" if keep_alive else "connection: close")
    if length is None:
        lines.append("transfer-encoding: chunked")
    else:
        lines.append(f"content-length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def write_chunk(writer: asyncio.StreamWriter, data: bytes, *, prefix: bytes = b"") -> None:
    """Send ``data`` as one chunk at once (the empty chunk ends the body), after
    ``prefix`` (the head, with the first chunk: one send instead of two)."""
    writer.write(prefix + f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


async def write_whole(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    content_type: str,
    *,
    keep_alive: bool,
) -> None:
    """Send a complete response with a ``content-length`` (one send)."""
    head = head_bytes(
        status, [("content-type", content_type)], keep_alive=keep_alive, length=len(body)
    )
    writer.write(head + body)
    await writer.drain()


def error_value(status: int, kind: str, message: str) -> dict[str, Any]:
    """The JSON value of :func:`error_body`."""
    return {
        "type": "error",
        "error": {"type": kind, "code": kind, "message": message, "status": status},
    }


def error_body(status: int, kind: str, message: str) -> bytes:
    """An error body the OpenAI and Anthropic clients both read a message from."""
    return json.dumps(error_value(status, kind, message), ensure_ascii=False).encode()
