"""HTTP/1.1 plumbing of the fake servers: the request record, connections, exchanges.

Stdlib only. :class:`Exchange` is what a route handler answers through: whole
responses, chunked SSE streams with :class:`~dsh.testing.model_servers.StreamFaults`,
and connection-level faults (hang, reset, clean close mid-body).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from dsh.core import DshError
from dsh.testing.model_servers._script import NO_FAULTS, StreamFaults
from dsh.testing.model_servers._sse import SSEEvent

__all__ = ["Exchange", "Handler", "RecordedRequest"]

_HEAD_LIMIT = 64 * 1024


@dataclass(eq=False)
class RecordedRequest:
    """One request the server received, and what became of it.

    ``path`` includes the query string; header names are lower-cased (repeated
    headers joined with ``", "``); ``json`` is the parsed body, or None when the
    body is empty or not JSON. The outcome fields are updated by the server
    thread: ``status`` (sent status, None if none), ``finished`` (the response
    was completely sent) and ``client_disconnected`` (the client went away first).
    ``connection`` numbers the TCP connection it came on (1, 2, ...), so tests can
    tell a reused (pooled) connection from a new one.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""
    json: Any = None
    index: int = 0
    status: int | None = None
    finished: bool = False
    client_disconnected: bool = False
    connection: int = 0

    @property
    def url_path(self) -> str:
        """The path without the query string."""
        return urlsplit(self.path).path

    @property
    def query(self) -> dict[str, list[str]]:
        """The query string, parsed."""
        return parse_qs(urlsplit(self.path).query)

    def header(self, name: str, default: str | None = None) -> str | None:
        """The value of header ``name`` (any case)."""
        return self.headers.get(name.lower(), default)


Handler = Callable[["Exchange"], Awaitable[None]]
"""A route handler: answers one request through its :class:`Exchange`."""


class BadRequest(DshError):
    """The bytes on the wire are not an HTTP/1.1 request we can parse (answered 400)."""


class Connection:
    """One client connection: a reader pump that buffers input and notices EOF."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int = 0
    ) -> None:
        self.number = number
        """Serial number of this connection on its server (1, 2, ...)."""
        self.reader = reader
        self.writer = writer
        self.buffer = bytearray()
        self.peer_closed = asyncio.Event()
        self._data = asyncio.Event()
        self.done = False
        """No further request may be served (we closed, reset or hung it)."""

    async def pump(self) -> None:
        """Read into :attr:`buffer` until EOF; then set :attr:`peer_closed`."""
        try:
            while chunk := await self.reader.read(65536):
                self.buffer += chunk
                self._data.set()
        except (ConnectionError, OSError):
            pass
        # Not on cancellation: that is the server closing, not the peer.
        self.peer_closed.set()
        self._data.set()

    async def _more(self) -> bool:
        if self.peer_closed.is_set():
            return False
        self._data.clear()
        await self._data.wait()
        return True

    async def read_until(self, separator: bytes, limit: int = _HEAD_LIMIT) -> bytes | None:
        """Take bytes up to and including ``separator``; None if the peer closed first."""
        while (at := self.buffer.find(separator)) < 0:
            if len(self.buffer) > limit:
                raise BadRequest("request head too large")
            if not await self._more():
                return None
        end = at + len(separator)
        out = bytes(self.buffer[:end])
        del self.buffer[:end]
        return out

    async def read_exactly(self, size: int) -> bytes | None:
        """Take exactly ``size`` bytes; None if the peer closed first."""
        while len(self.buffer) < size:
            if not await self._more():
                return None
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        return out


class Exchange:
    """Answers one request: whole responses, chunked streams and faults."""

    def __init__(self, server: object, conn: Connection, request: RecordedRequest) -> None:
        self.server = server
        """The server that received the request (a
        :class:`~dsh.testing.model_servers.FakeServer`)."""
        self.request = request
        self.connection = conn
        self.started = False
        """The status line has been sent."""

    # -- whole responses ------------------------------------------------------------

    async def send(
        self,
        status: int,
        body: bytes,
        *,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Send a complete response with a ``content-length``."""
        head = {"content-type": content_type, "content-length": str(len(body)), **(headers or {})}
        await self._write(self._head(status, head) + body, final=True)

    async def send_json(
        self, status: int, value: Any, *, headers: Mapping[str, str] | None = None
    ) -> None:
        """Send ``value`` as a JSON response."""
        await self.send(status, json.dumps(value).encode(), headers=headers)

    async def send_json_faulted(
        self, status: int, value: Any, faults: StreamFaults = NO_FAULTS
    ) -> None:
        """Send a JSON response with ``faults`` applied (see :class:`StreamFaults`)."""
        if faults.delay:
            await asyncio.sleep(faults.delay)
        if faults.reset_after is not None:
            await self.reset()
        elif faults.hang_after is not None:
            await self.hang()
        elif faults.close_after is not None:
            body = json.dumps(value).encode()
            head = {"content-type": "application/json", "content-length": str(len(body))}
            await self._write(self._head(status, head) + body[: len(body) // 2])
            await self.close_connection()
        elif faults.malformed_after is not None:
            await self.send(status, faults.malformed_data)
        else:
            await self.send_json(status, value)

    # -- streams --------------------------------------------------------------------

    async def start_stream(
        self,
        status: int = 200,
        *,
        content_type: str = "text/event-stream",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Send the head of a chunked response (``text/event-stream`` by default)."""
        head = {
            "content-type": content_type,
            "cache-control": "no-cache",
            "transfer-encoding": "chunked",
            **(headers or {}),
        }
        await self._write(self._head(status, head))

    async def write_chunk(self, data: bytes) -> None:
        """Send ``data`` as one chunk of a started stream."""
        if data:
            await self._write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    async def write_event(self, event: SSEEvent | bytes) -> None:
        """Send one SSE event (or raw bytes) as one chunk."""
        await self.write_chunk(event.encode() if isinstance(event, SSEEvent) else event)

    async def end_stream(self) -> None:
        """Finish a started stream (the terminating zero-length chunk)."""
        await self._write(b"0\r\n\r\n", final=True)

    async def stream(
        self,
        events: Iterable[SSEEvent | bytes],
        faults: StreamFaults = NO_FAULTS,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Stream ``events`` as SSE with ``faults`` applied, then end the stream."""
        items = list(events)
        await self.start_stream(status, headers=headers)
        for sent, event in enumerate(items):
            if await self._fault_at(sent, faults):
                return
            if faults.delay:
                await asyncio.sleep(faults.delay)
            await self.write_event(event)
        if await self._fault_at(len(items), faults):
            return
        await self.end_stream()

    async def _fault_at(self, sent: int, faults: StreamFaults) -> bool:
        if faults.malformed_after == sent:
            await self.write_chunk(faults.malformed_data)
        if faults.reset_after == sent:
            await self.reset()
        elif faults.close_after == sent:
            await self.close_connection()
        elif faults.hang_after == sent:
            await self.hang()
        else:
            return False
        return True

    # -- faults ---------------------------------------------------------------------

    async def hang(self) -> None:
        """Send nothing more, ever: returns only when the client or the server closes."""
        self.connection.done = True
        await asyncio.get_running_loop().create_future()

    async def reset(self) -> None:
        """Reset the connection (RST): the client sees ECONNRESET."""
        self.connection.done = True
        transport = self.connection.writer.transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    async def close_connection(self) -> None:
        """Close the connection cleanly (FIN) wherever the response stands."""
        self.connection.done = True
        self.connection.writer.close()

    # -- plumbing -------------------------------------------------------------------

    def _head(self, status: int, headers: Mapping[str, str]) -> bytes:
        if self.started:
            raise RuntimeError("the response has already started")
        self.started = True
        self.request.status = status
        keep = not self.connection.done and self.request.header("connection", "") != "close"
        base = {"server": "dsh-fake", "x-request-id": f"req_{self.request.index + 1}"}
        merged = {**base, "connection": "keep-alive" if keep else "close", **headers}
        lines = [f"HTTP/1.1 {status} {_reason(status)}"]
        lines.extend(f"{name}: {value}" for name, value in merged.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _write(self, data: bytes, *, final: bool = False) -> None:
        writer = self.connection.writer
        if writer.is_closing():
            raise ConnectionResetError("the connection is closed")
        # Mark a final write before sending it: the client may act on it at once.
        self.request.finished = final
        try:
            writer.write(data)
            await writer.drain()
        except BaseException:
            self.request.finished = False
            raise


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


async def read_request(conn: Connection) -> RecordedRequest | None:
    """Read one request from ``conn``; None if the peer closed before a whole one."""
    head = await conn.read_until(b"\r\n\r\n")
    if head is None:
        return None
    lines = head.decode("latin-1").strip("\r\n").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"bad request line: {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        key, value = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(conn)
    else:
        try:
            size = int(headers.get("content-length", "0"))
        except ValueError:
            raise BadRequest("bad content-length") from None
        body = await conn.read_exactly(size)
    if body is None:
        return None
    parsed: Any = None
    if body:
        with contextlib.suppress(ValueError):
            parsed = json.loads(body)
    return RecordedRequest(
        parts[0].upper(), parts[1], headers, body, parsed, connection=conn.number
    )


async def _read_chunked(conn: Connection) -> bytes | None:
    body = bytearray()
    while True:
        line = await conn.read_until(b"\r\n")
        if line is None:
            return None
        try:
            size = int(line.split(b";")[0].strip(), 16)
        except ValueError:
            raise BadRequest("bad chunk size") from None
        if size == 0:
            while await conn.read_until(b"\r\n") not in (b"\r\n", None):
                pass
            return bytes(body)
        chunk = await conn.read_exactly(size + 2)
        if chunk is None:
            return None
        body += chunk[:-2]
