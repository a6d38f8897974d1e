"""The ``codex app-server`` wire: newline-delimited JSON-RPC without a ``jsonrpc`` field.

Messages are told apart by their keys, never by id ranges (codex numbers its own
requests from 0, so ids collide with ours):

* ``{"id", "result"}`` / ``{"id", "error"}`` — the response to one of our requests;
* ``{"id", "method", "params"}`` — a *server request*: must be answered, same id;
* ``{"method", "params"}`` — a notification.

:class:`AppServerConnection` sends requests and notifications, routes responses
to their waiting callers, hands notifications to a callback, and answers every
server request with what a (synchronous) handler decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "METHOD_NOT_FOUND",
    "AppServerConnection",
    "ConnectionClosed",
    "Notification",
    "ProtocolError",
    "Response",
    "RpcError",
    "ServerRequest",
    "ServerRequestAnswer",
    "classify",
]

_log = logging.getLogger("dsh.subagent_codex.rpc")

METHOD_NOT_FOUND = -32601
"""JSON-RPC error code for a method the receiver does not handle."""

RequestId = int | str


class RpcError(Exception):
    """Codex answered one of our requests with an error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message
        self.data = data


class ConnectionClosed(Exception):
    """Codex's stdout ended (the process exited or closed it) before an answer came."""


class ProtocolError(Exception):
    """A line from codex that is not a message of this protocol."""


@dataclass(frozen=True, slots=True)
class Response:
    """The answer to one of our requests: ``result`` or ``error``."""

    id: RequestId
    result: Any = None
    error: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """A request from codex that must be answered with the same ``id``."""

    id: RequestId
    method: str
    params: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Notification:
    """A one-way message from codex."""

    method: str
    params: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ServerRequestAnswer:
    """How to answer a server request: a ``result``, or an ``error`` (code, message)."""

    result: Any = None
    error: tuple[int, str] | None = None


Message = Response | ServerRequest | Notification


def classify(message: Any) -> Message:
    """Sort one decoded line into a response, a server request or a notification."""
    if not isinstance(message, Mapping):
        raise ProtocolError(f"expected a JSON object, got {type(message).__name__}")
    params = message.get("params")
    params = params if isinstance(params, Mapping) else {}
    method = message.get("method")
    if method is not None:
        if not isinstance(method, str):
            raise ProtocolError(f"method must be a string, got {method!r}")
        if "id" in message:
            return ServerRequest(message["id"], method, params)
        return Notification(method, params)
    if "id" in message and ("result" in message or "error" in message):
        error = message.get("error")
        if error is not None and not isinstance(error, Mapping):
            error = {"code": 0, "message": str(error)}
        return Response(message["id"], message.get("result"), error)
    raise ProtocolError(f"neither a response, a request nor a notification: keys {sorted(message)}")


class AppServerConnection:
    """One stdio connection to ``codex app-server``.

    Run :meth:`read_loop` in a task; it returns at EOF, after failing every pending
    request with :class:`ConnectionClosed`. ``on_notification`` and ``on_request``
    are called from the read loop and must not block; the answer ``on_request``
    returns is written back at once.
    """

    def __init__(
        self,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        *,
        on_notification: Callable[[Notification], None],
        on_request: Callable[[ServerRequest], ServerRequestAnswer],
    ) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._on_notification = on_notification
        self._on_request = on_request
        self._ids = itertools.count(1)
        self._pending: dict[RequestId, tuple[str, asyncio.Future[Any]]] = {}
        self._closed: BaseException | None = None
        self.noise: list[str] = []
        """Lines that were not protocol messages (the last few, shortened)."""

    @property
    def closed(self) -> bool:
        """True once stdout has ended."""
        return self._closed is not None

    @property
    def close_reason(self) -> str | None:
        """Why reading stopped (EOF, an over-long line, a read error), once it has."""
        return str(self._closed) if self._closed is not None else None

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Send a request and wait for its result; :class:`RpcError` for an error answer."""
        if self._closed is not None:
            raise ConnectionClosed(f"codex closed the connection before {method}")
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (method, future)
        message: dict[str, Any] = {"method": method, "id": request_id}
        if params is not None:
            message["params"] = dict(params)
        try:
            await self._send(message)
            return await future
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification."""
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = dict(params)
        await self._send(message)

    async def _send(self, message: Mapping[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n"
        try:
            self._stdin.write(line.encode())
            await self._stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise ConnectionClosed(f"cannot write to codex: {exc or type(exc).__name__}") from exc

    async def read_loop(self) -> None:
        """Read and dispatch messages until EOF."""
        closed: BaseException = ConnectionClosed("codex closed its stdout")
        try:
            while True:
                try:
                    line = await self._stdout.readline()
                except ValueError as exc:  # a line over the stream limit
                    closed = ConnectionClosed(f"codex sent an over-long line: {exc}")
                    return
                except (ConnectionError, OSError) as exc:
                    closed = ConnectionClosed(f"reading codex stdout failed: {exc}")
                    return
                if not line:
                    return
                if line.strip():
                    await self._dispatch(line)
        finally:
            self._closed = closed
            for method, future in list(self._pending.values()):
                if not future.done():
                    gone = ConnectionClosed(f"codex exited before answering {method}")
                    future.set_exception(gone)

    async def _dispatch(self, line: bytes) -> None:
        try:
            message = classify(json.loads(line))
        except (ValueError, ProtocolError) as exc:
            text = line.decode("utf-8", errors="replace").strip()
            self.noise = [*self.noise[-4:], text[:200]]
            _log.debug("ignoring a non-protocol line from codex: %s (%s)", text[:200], exc)
            return
        if isinstance(message, Response):
            pending = self._pending.get(message.id)
            if pending is None:
                _log.debug("response to an unknown request id %r", message.id)
                return
            method, future = pending
            if future.done():
                return
            if message.error is not None:
                code = message.error.get("code", 0)
                text = str(message.error.get("message", "error"))
                future.set_exception(
                    RpcError(
                        method,
                        int(code) if isinstance(code, int) else 0,
                        text,
                        message.error.get("data"),
                    )
                )
            else:
                future.set_result(message.result)
        elif isinstance(message, ServerRequest):
            try:
                answer = self._on_request(message)
            except Exception as exc:  # a bug in the handler must not leave codex waiting
                _log.exception("server request handler failed for %s", message.method)
                answer = ServerRequestAnswer(error=(-32603, f"client error: {exc}"))
            reply: dict[str, Any] = {"id": message.id}
            if answer.error is not None:
                reply["error"] = {"code": answer.error[0], "message": answer.error[1]}
            else:
                reply["result"] = answer.result
            with contextlib.suppress(ConnectionClosed):  # EOF follows
                await self._send(reply)
        else:
            self._on_notification(message)
