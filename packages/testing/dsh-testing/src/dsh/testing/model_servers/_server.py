"""The shared base of the fake model servers: a scripted HTTP/1.1 server.

A :class:`FakeServer` listens on 127.0.0.1 (ephemeral port) and runs in its own
thread with its own asyncio loop, so it keeps serving while a test blocks its
own loop, and works the same from sync and async tests::

    with OpenAIChatServer(ChatReply(text="hi")) as srv:       # or: async with
        call(srv.base_url)
        assert srv.requests[0].json["model"] == "deepseek-chat"

Each request to a *scripted route* takes the next item of the script queue:

* a protocol item (e.g. ``ChatReply``), which the protocol subclass renders in
  :meth:`FakeServer.render` (usually as SSE events through :meth:`Exchange.stream`,
  whose :class:`StreamFaults` add delays, resets, hangs and garbage mid-stream);
* a generic fault: :class:`HTTPError`, :class:`Hang`, :class:`Reset`;
* a callable ``(RecordedRequest) -> item`` (sync or async), to answer as a
  function of the request.

To build a protocol fake: subclass, register routes in ``__init__`` with
:meth:`FakeServer.route` (``self.respond_scripted`` as the handler for scripted
endpoints), implement :meth:`FakeServer.render` and override
:meth:`FakeServer.error_body` with the API's error JSON shape. A protocol whose
requests are answered by what they say (``srv.when("say hello", ...)``) subclasses
:class:`~dsh.testing.model_servers.rules.RuleServer` instead.

Closing the server cancels every handler, aborts every open connection
(including hanging ones) and joins the thread: nothing lingers.
"""

from __future__ import annotations

import asyncio
import http.client
import inspect
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from dsh.tape.serving import BackgroundServer
from dsh.testing.model_servers._http import (
    BadRequest,
    Connection,
    Exchange,
    Handler,
    RecordedRequest,
    read_request,
)
from dsh.testing.model_servers._script import Hang, HTTPError, Reset

__all__ = ["FakeServer"]


class FakeServer(BackgroundServer):
    """A scripted HTTP/1.1 server on 127.0.0.1 in a thread of its own.

    ``script`` items are queued for the scripted routes; ``default`` answers
    once the queue is empty (otherwise an exhausted script answers HTTP 500 with
    a message saying so). Subclasses add routes and render protocol items.
    """

    def __init__(self, *script: Any, default: Any = None, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.default: Any = default
        """Answer when the script queue is empty (None: HTTP 500 "script exhausted")."""
        self.errors: list[BaseException] = []
        """Exceptions raised by handlers (each was answered with HTTP 500)."""
        self._script: deque[Any] = deque(script)
        self._lock = threading.Lock()
        self._log: list[RecordedRequest] = []
        self._routes: dict[tuple[str, str], Handler] = {}
        self._connections = itertools.count(1)

    # -- configuration ----------------------------------------------------------------

    def route(self, method: str, path: str, handler: Handler) -> None:
        """Answer ``method`` requests to ``path`` (exact, query ignored) with ``handler``."""
        self._routes[(method.upper(), path)] = handler

    def script(self, *items: Any) -> None:
        """Queue ``items`` for the next requests to scripted routes."""
        with self._lock:
            self._script.extend(items)

    @property
    def pending(self) -> int:
        """Script items not yet used."""
        with self._lock:
            return len(self._script)

    # -- protocol hooks -----------------------------------------------------------------

    async def render(self, item: Any, exchange: Exchange) -> None:
        """Answer with a protocol item (subclasses implement; the base knows none)."""
        raise TypeError(f"{type(self).__name__} cannot render a {type(item).__name__}")

    def error_body(self, status: int, message: str) -> Any:
        """The JSON body of an error in this API's shape (subclasses override)."""
        return {"error": {"message": message, "code": status}}

    # -- the request log ----------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in order."""
        return list(self._log)

    @property
    def last_request(self) -> RecordedRequest:
        """The most recent request (``IndexError`` if none)."""
        return self._log[-1]

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Block until ``predicate()`` holds; ``TimeoutError`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            time.sleep(0.005)

    async def async_wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float = 5.0,
    ) -> None:
        """Like :meth:`wait_until` without blocking the caller's event loop."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            await asyncio.sleep(0.005)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``count`` requests arrived; returns the log."""
        self.wait_until(lambda: len(self._log) >= count, timeout)
        return self.requests

    def post_json(
        self,
        path: str,
        payload: Any,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 5.0,
    ) -> tuple[int, bytes]:
        """``POST`` ``payload`` as JSON to ``path`` here; ``(status, whole body)``.

        A blocking client for tests of the server itself (one connection per call).
        """
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            head = {"content-type": "application/json", **(headers or {})}
            conn.request("POST", path, json.dumps(payload), head)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    # -- lifecycle ------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash)."""
        if not self.port:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://{self.host}:{self.port}"

    def __repr__(self) -> str:
        where = self.base_url if self.port else "not started"
        return f"<{type(self).__name__} {where} requests={len(self._log)}>"

    # -- the server thread --------------------------------------------------------------

    async def on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve one connection's requests, with a pump that notices the peer close."""
        conn = Connection(reader, writer, next(self._connections))
        pump = asyncio.create_task(conn.pump())
        try:
            await self._serve_connection(conn)
        finally:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    async def _serve_connection(self, conn: Connection) -> None:
        while not conn.done:
            try:
                request = await read_request(conn)
            except BadRequest as exc:
                exchange = Exchange(self, conn, RecordedRequest("?", "?", {}))
                conn.done = True
                await exchange.send_json(400, self.error_body(400, str(exc)))
                return
            if request is None:
                return
            with self._lock:
                request.index = len(self._log)
                self._log.append(request)
            exchange = Exchange(self, conn, request)
            handling = asyncio.create_task(self._handle(exchange))
            watch = asyncio.create_task(conn.peer_closed.wait())
            try:
                await asyncio.wait({handling, watch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                watch.cancel()
                if not handling.done():
                    closing = self.closing
                    if conn.peer_closed.is_set() and not request.finished and not closing:
                        request.client_disconnected = True
                    handling.cancel()
                await asyncio.gather(handling, watch, return_exceptions=True)
            if not request.finished or request.header("connection", "") == "close":
                return

    async def _handle(self, exchange: Exchange) -> None:
        request = exchange.request
        handler = self._routes.get((request.method, request.url_path))
        try:
            if handler is None:
                known = any(path == request.url_path for _, path in self._routes)
                status = 405 if known else 404
                what = "method not allowed" if known else "no route"
                message = f"fake server: {what} for {request.method} {request.url_path}"
                await exchange.send_json(status, self.error_body(status, message))
            else:
                await handler(exchange)
                if not exchange.started and not exchange.connection.done:
                    raise RuntimeError("the handler sent no response")
        except (ConnectionError, OSError):
            if not request.finished:
                request.client_disconnected = True
            exchange.connection.done = True
        except Exception as exc:
            self.errors.append(exc)
            if exchange.started or exchange.connection.done:
                exchange.connection.done = True
                return
            message = f"fake server error: {type(exc).__name__}: {exc}"
            await exchange.send_json(500, self.error_body(500, message))

    # -- scripted routes ----------------------------------------------------------------

    async def respond_scripted(self, exchange: Exchange) -> None:
        """Handler for scripted routes: answer with the next script item."""
        with self._lock:
            item: Any = self._script.popleft() if self._script else self.default
        if item is None:
            item = HTTPError(
                500,
                f"fake server: no scripted response left for {exchange.request.method} "
                f"{exchange.request.url_path} (request #{exchange.request.index + 1});"
                " script more items",
            )
        await self.perform(item, exchange)

    async def perform(self, item: Any, exchange: Exchange) -> None:
        """Answer with ``item``: resolve callables, apply generic faults, else render."""
        while callable(item):
            item = item(exchange.request)
            if inspect.isawaitable(item):
                item = await item
        if isinstance(item, HTTPError):
            body = item.body
            if body is None:
                body = self.error_body(item.status, item.message)
            await exchange.send_json(item.status, body, headers=item.headers)
        elif isinstance(item, Hang):
            await exchange.hang()
        elif isinstance(item, Reset):
            await exchange.reset()
        else:
            await self.render(item, exchange)
