"""``dsh mcp``'s stdin: newline-delimited frames read with a cap on a line's length.

The SDK's own stdio reader buffers a line whatever its size; this one keeps at most
``max_line_bytes`` of a line and drops a longer one (logged, never buffered whole),
so a runaway writer cannot exhaust memory. The wire's descriptor is a duplicate of
fd 0, which then points at the null device: nothing the server starts reads frames
meant for it. A pipe, socket or terminal is read on the event loop (no thread blocked
in a read that would keep the process alive after the server stopped); a regular file,
which never blocks, from a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio

__all__ = ["BoundedLines", "claim_stdin"]

_log = logging.getLogger("dsh.mcp")

_CHUNK = 64 * 1024


def claim_stdin() -> int:
    """A descriptor of this process's stdin for the wire; fd 0 then reads the null
    device."""
    wire = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    return wire


class BoundedLines:
    """The lines of ``fd`` as text (invalid UTF-8 replaced), each at most
    ``max_line_bytes``; a longer line is dropped and logged."""

    def __init__(self, fd: int, max_line_bytes: int) -> None:
        self._fd = fd
        self._max = max_line_bytes

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _thread_read(self) -> bytes:
        return await anyio.to_thread.run_sync(os.read, self._fd, _CHUNK, abandon_on_cancel=True)

    async def _lines(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader(limit=_CHUNK)
        read: Callable[[], Awaitable[bytes]] = self._thread_read
        transport: asyncio.BaseTransport | None = None
        try:
            pipe = os.fdopen(self._fd, "rb", buffering=0, closefd=False)
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(stream), pipe
            )

            async def read_stream() -> bytes:
                return await stream.read(_CHUNK)

            read = read_stream
        except (ValueError, OSError):  # a regular file: it never blocks a thread for long
            pass
        try:
            async for line in self._split(read):
                yield line
        finally:
            if transport is not None:
                with contextlib.suppress(Exception):
                    transport.close()

    async def _split(self, read: Callable[[], Awaitable[bytes]]) -> AsyncIterator[str]:
        buffer = bytearray()
        dropping = 0
        while True:
            try:
                chunk = await read()
            except OSError:
                chunk = b""
            if not chunk:
                if buffer and not dropping:
                    yield buffer.decode("utf-8", errors="replace")
                return
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                piece = chunk[start:] if end < 0 else chunk[start:end]
                if dropping:
                    dropping += len(piece)
                elif len(buffer) + len(piece) > self._max:
                    dropping = len(buffer) + len(piece)
                    buffer.clear()
                else:
                    buffer += piece
                if end < 0:
                    break
                start = end + 1
                if dropping:
                    _log.warning(
                        "dropped a frame of %d bytes or more (over --max-line-bytes %d)",
                        dropping,
                        self._max,
                    )
                    dropping = 0
                    continue
                line = buffer.decode("utf-8", errors="replace")
                buffer.clear()
                if line.strip():
                    yield line
