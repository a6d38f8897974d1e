"""A loopback TCP server in a thread of its own: :class:`BackgroundServer`.

The base of the recording proxy (:class:`dsh.tape.TapeProxy`) and of the fake model
servers in ``dsh.testing.model_servers``: an :func:`asyncio.start_server` on an
ephemeral port, served by its own event loop in a daemon thread, so it keeps
answering while the code that uses it blocks its own loop, and works the same from
sync and async code. A subclass implements :meth:`BackgroundServer.on_connection`;
closing cancels every connection task, aborts every open connection (hanging ones
included) and joins the thread, so nothing lingers.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self

__all__ = ["BackgroundServer"]


class BackgroundServer:
    """An asyncio TCP server on ``host`` (127.0.0.1 by default), in a thread of its own.

    Subclasses implement :meth:`on_connection`, may wrap the serving time in
    :meth:`serving` (for instance to hold an HTTP client open) and may say how a
    failed start is reported (:meth:`start_error`). Use as a context manager
    (``with`` or ``async with``) or :meth:`start` / :meth:`close`.
    """

    stream_limit: int = 2**16
    """The ``limit`` of each connection's :class:`asyncio.StreamReader`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        """The address the server binds (port chosen by the system)."""
        self._port = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.accepted = 0
        """Connections accepted so far."""

    # -- for subclasses -------------------------------------------------------------

    async def on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve one connection (the base closes it afterwards, or aborts it when the
        server is closing). Subclasses implement."""
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Held open, in the server's loop, from before binding until every connection
        has ended (subclasses override; the base holds nothing)."""
        yield

    def start_error(self, failure: BaseException | None) -> Exception:
        """The exception :meth:`start` raises when binding failed or took over 10 s."""
        return RuntimeError(f"{type(self).__name__} failed to start: {failure}")

    @property
    def closing(self) -> bool:
        """True once :meth:`close` asked the server to stop."""
        return self._stop is not None and self._stop.is_set()

    # -- lifecycle ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (0 before :meth:`start`)."""
        return self._port

    def start(self) -> Self:
        """Bind and start serving in a background thread; returns ``self``."""
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} is already started")
        thread = threading.Thread(target=self._main, name=type(self).__name__, daemon=True)
        self._thread = thread
        thread.start()
        if not self._ready.wait(10) or self._failure is not None:
            failure = self._failure
            self.close()
            raise self.start_error(failure) from failure
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Stop: cancel connection tasks, abort connections, join the thread. Idempotent."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"{type(self).__name__}'s thread did not stop within {timeout} s")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self.start()  # a millisecond or two: no worker thread needed

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the server thread ----------------------------------------------------------

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._failure = exc
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                self._ready.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with self.serving():
            server = await asyncio.start_server(
                self._connection, self.host, 0, limit=self.stream_limit
            )
            self._port = server.sockets[0].getsockname()[1]
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                server.close()
                for writer in list(self._writers):
                    writer.transport.abort()
                current = asyncio.current_task()
                for _ in range(5):
                    tasks = [t for t in asyncio.all_tasks() if t is not current]
                    if not tasks:
                        break
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                await server.wait_closed()
                for _ in range(3):  # let transports run their connection_lost callbacks
                    await asyncio.sleep(0)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.accepted += 1
        try:
            await self.on_connection(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            # The client went away, or the server is closing. (A connection task must
            # not end cancelled: asyncio's stream protocol would log it as an error.)
            pass
        finally:
            self._writers.discard(writer)
            transport = writer.transport
            if self.closing:
                transport.abort()
            elif not transport.is_closing():
                writer.close()
