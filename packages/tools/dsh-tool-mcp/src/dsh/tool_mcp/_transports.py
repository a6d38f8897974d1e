"""Transports to MCP servers: a stdio transport on dsh's process kit, and the SDK's
streamable HTTP and SSE transports with headers from the configuration.

Why not the SDK's ``stdio_client``: it starts the server in a process group of its
own, but on exit it only kills that group when the server outlives the stdin-close
grace. A server that exits promptly on EOF leaves its own children (a ``npx``
wrapper's node process, a tool's helper) running, and nothing kills the server if
this process is killed outright. :class:`StdioTransport` starts the server through
:class:`dsh.subprocess.ChildProcess` instead: a credential-scrubbed environment
plus a :class:`~dsh.subprocess.RunTag`, the group registered with this process's
watchdog (so the server dies with us even on SIGKILL), and a teardown that closes
stdin, waits, SIGTERMs then SIGKILLs the group, kills what is left of it and sweeps
every process carrying the run's tag (descendants that left the group included).
Messages are framed exactly as the SDK's stdio transport frames them.

A message (one line of the server's stdout) longer than ``max_message_bytes`` breaks
the connection: :attr:`StdioTransport.failure` says why, the read side ends (so every
pending request fails at once instead of waiting for an answer that was dropped),
``on_broken`` is called, and on the way out the server is stopped without the stdin
grace (it is likely blocked writing the rest of the line).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
import httpx2
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client import Transport
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from dsh.core import DshError
from dsh.subprocess import ChildProcess, RunTag, Sandbox

if TYPE_CHECKING:
    from mcp.client._transport import ReadStream, WriteStream

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "StdioTransport", "TransportStreams", "http_transport"]

_log = logging.getLogger("dsh.tool_mcp")

TransportStreams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]

_HTTP_TIMEOUT = 30.0
"""Seconds for connecting and writing HTTP requests."""
_HTTP_READ_TIMEOUT = 300.0
"""Seconds a response stream may stay silent (servers hold SSE streams open)."""
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Longest message (one line of stdout, in bytes) a stdio server may send by default."""
_READ_CHUNK = 64 * 1024


class StdioTransport:
    """An MCP server as a child process speaking newline-delimited JSON-RPC on stdio.

    An async context manager yielding the (read, write) stream pair the SDK's
    ``ClientSession`` takes. :attr:`child` is the process once started.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        what: str,
        tag: RunTag,
        eof_grace: float = 2.0,
        term_grace: float = 2.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        on_broken: Callable[[str], None] | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd
        self.what = what
        self.tag = tag
        self.eof_grace = eof_grace
        self.term_grace = term_grace
        self.max_message_bytes = max_message_bytes
        self.on_broken = on_broken
        self.sandbox = sandbox
        """The OS sandbox the server runs in (None: unsandboxed)."""
        self.child: ChildProcess | None = None
        self.failure: str | None = None
        """Why the connection broke (a message over ``max_message_bytes``), if it did."""
        self._cm: AbstractAsyncContextManager[TransportStreams] | None = None

    async def __aenter__(self) -> TransportStreams:
        cm = self._connect()
        streams = await cm.__aenter__()
        self._cm = cm
        return streams

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        cm, self._cm = self._cm, None
        if cm is None:
            return None
        return await cm.__aexit__(exc_type, exc, tb)

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[TransportStreams]:
        child = await ChildProcess.start(
            self.argv,
            env=self.env,
            cwd=self.cwd,
            what=self.what,
            tag=self.tag,
            sandbox=self.sandbox,
        )
        self.child = child
        read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump_stdout, child, read_send)
                tg.start_soon(_pump_stdin, child, write_receive, read_send)
                try:
                    yield read_receive, write_send
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                # a broken server is likely blocked writing the rest of its line: no stdin grace
                eof_grace = 0.0 if self.failure is not None else self.eof_grace
                await child.terminate(eof_grace=eof_grace, term_grace=self.term_grace)
                for stream in (read_send, read_receive, write_send, write_receive):
                    stream.close()

    async def _pump_stdout(
        self, child: ChildProcess, send: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> None:
        """Server stdout → session, one JSON-RPC message per line; ends at EOF, or at a
        message over the limit (then :attr:`failure` says so and ``on_broken`` is told)."""
        lines = _LineReader(child.stdout, self.max_message_bytes)
        with send:
            while True:
                try:
                    line = await lines.readline()
                except _TooLong:
                    self._broke(child)
                    return
                except (ConnectionError, OSError):
                    return
                if line is None:
                    return  # EOF: the server exited (or closed its stdout)
                text = line.strip()
                if not text:
                    continue
                item: SessionMessage | Exception
                try:
                    item = SessionMessage(
                        mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
                    )
                except ValueError as exc:
                    _log.debug("%s: not a JSON-RPC message on stdout: %r", self.what, text[:200])
                    item = exc
                try:
                    await send.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    def _broke(self, child: ChildProcess) -> None:
        limit = self.max_message_bytes
        self.failure = (
            f"{self.what} sent a message longer than its limit of {limit} bytes"
            " (max_message_bytes): the connection was closed, the server stopped and"
            " its pending calls failed; raise max_message_bytes in the server's config"
            " if it really sends messages that large"
        )
        _log.warning("%s (pid %s)", self.failure, child.pid)
        if self.on_broken is not None:
            self.on_broken(self.failure)


class _TooLong(DshError):
    """A line longer than the reader's limit."""


class _LineReader:
    """Newline-delimited lines of a stream, each at most ``limit`` bytes (a longer one
    raises :class:`_TooLong` as soon as it is known to be too long)."""

    __slots__ = ("_buffer", "_limit", "_scanned", "_stream")

    def __init__(self, stream: asyncio.StreamReader, limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline

    async def readline(self) -> bytes | None:
        """The next line without its newline (at EOF, what is left); None after EOF."""
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                if end > self._limit:
                    raise _TooLong
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buffer)
            if self._scanned > self._limit:
                raise _TooLong
            chunk = await self._stream.read(_READ_CHUNK)
            if not chunk:
                rest = bytes(self._buffer)
                self._buffer.clear()
                self._scanned = 0
                return rest or None
            self._buffer += chunk


async def _pump_stdin(
    child: ChildProcess,
    receive: MemoryObjectReceiveStream[SessionMessage],
    reader: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    """Session → server stdin. If the server stops reading, end the read side so
    that waiting requests fail instead of hanging."""
    with receive:
        try:
            async for message in receive:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                child.stdin.write(data.encode() + b"\n")
                await child.stdin.drain()
        except (ConnectionError, OSError, RuntimeError, asyncio.IncompleteReadError):
            reader.close()


def http_transport(url: str, *, headers: Mapping[str, str], sse: bool = False) -> Transport:
    """The SDK's streamable HTTP (or SSE) client transport with ``headers`` on every request."""
    if sse:
        return sse_client(
            url, headers=dict(headers), timeout=_HTTP_TIMEOUT, sse_read_timeout=_HTTP_READ_TIMEOUT
        )
    return _streamable_http(url, dict(headers))


@asynccontextmanager
async def _streamable_http(
    url: str, headers: dict[str, str]
) -> AsyncIterator[tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]]:
    client = httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(_HTTP_TIMEOUT, read=_HTTP_READ_TIMEOUT)
    )
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


def describe_exit(child: ChildProcess | None) -> str:
    """``exit status N`` / ``killed by SIGX`` / ``still running`` (``not started``)."""
    if child is None:
        return "not started"
    return child.exit_description()
