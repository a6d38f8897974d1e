"""The ``codex app-server`` wire: newline-delimited JSON-RPC without a ``jsonrpc`` field,
spoken through :class:`dsh.jsonrpc.Peer` (``send_version=False``).

Messages are told apart by their keys, never by id ranges (codex numbers its own
requests from 0, so ids collide with ours):

* ``{"id", "result"}`` / ``{"id", "error"}`` — the response to one of our requests;
* ``{"id", "method", "params"}`` — a *server request*: must be answered, same id;
* ``{"method", "params"}`` — a notification.

:class:`AppServerConnection` sends requests and notifications, hands notifications to
a callback, and answers every server request with what a (synchronous) handler
decides, at once and in wire order. Lines that are not messages are kept as
:attr:`~AppServerConnection.noise` and skipped; a line over the cap ends the
connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dsh import jsonrpc
from dsh.core import DshError

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

METHOD_NOT_FOUND = jsonrpc.METHOD_NOT_FOUND
"""JSON-RPC error code for a method the receiver does not handle."""

_STREAM_LIMIT = 64 * 1024 * 1024
"""The longest line codex may send (64 MiB, the limit of the child's stdout stream)."""

RequestId = int | str


class RpcError(DshError):
    """Codex answered one of our requests with an error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message
        self.data = data


class ConnectionClosed(DshError):
    """Codex's stdout ended (the process exited or closed it) before an answer came, or a
    request could not be written."""


class ProtocolError(DshError):
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
    """Sort one decoded line into a response, a server request or a notification
    (:class:`ProtocolError` for anything else)."""
    frame = jsonrpc.classify_message(message)
    checked = frame.message
    if frame.kind == "error" or checked is None:
        raise ProtocolError(frame.reason)
    if frame.kind == "response":
        return Response(checked["id"], checked.get("result"), checked.get("error"))
    if frame.kind == "request":
        return _server_request(checked)
    return _notification(checked)


def _params(message: Mapping[str, Any]) -> Mapping[str, Any]:
    params = message.get("params")
    return params if isinstance(params, Mapping) else {}


def _server_request(message: Mapping[str, Any]) -> ServerRequest:
    return ServerRequest(message["id"], message["method"], _params(message))


def _notification(message: Mapping[str, Any]) -> Notification:
    return Notification(message["method"], _params(message))


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
        self._on_notification = on_notification
        self._on_request = on_request
        self._peer = jsonrpc.Peer(
            stdout,
            stdin,
            name="codex",
            on_request=self._answer,
            on_notification=self._notify,
            on_invalid=self._invalid,
            max_line_bytes=_STREAM_LIMIT,
            send_version=False,
        )
        self.noise: list[str] = []
        """Lines that were not protocol messages (the last few, shortened)."""

    @property
    def closed(self) -> bool:
        """True once stdout has ended."""
        return self._peer.closed

    @property
    def close_reason(self) -> str | None:
        """Why reading stopped (EOF, an over-long line, a read error), once it has."""
        return self._peer.close_reason

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Send a request and wait for its result; :class:`RpcError` for an error answer,
        :class:`ConnectionClosed` when codex goes away first."""
        try:
            return await self._peer.request(method, dict(params) if params is not None else None)
        except jsonrpc.RemoteError as exc:
            code = exc.code if isinstance(exc.code, int) else 0
            raise RpcError(method, code, exc.message, exc.data) from None
        except jsonrpc.PeerClosed as exc:
            raise ConnectionClosed(str(exc)) from None

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification."""
        try:
            await self._peer.notify(method, dict(params) if params is not None else None)
        except jsonrpc.PeerClosed as exc:
            raise ConnectionClosed(str(exc)) from None

    async def read_loop(self) -> None:
        """Read and dispatch messages until EOF."""
        await self._peer.run()

    def _notify(self, message: dict[str, Any]) -> None:
        self._on_notification(_notification(message))

    def _answer(self, message: dict[str, Any]) -> Any:
        request = _server_request(message)
        try:
            answer = self._on_request(request)
        except Exception as exc:  # a bug in the handler must not leave codex waiting
            _log.exception("server request handler failed for %s", request.method)
            answer = ServerRequestAnswer(error=(-32603, f"client error: {exc}"))
        if answer.error is not None:
            raise jsonrpc.RemoteError(*answer.error)
        return answer.result

    def _invalid(self, invalid: jsonrpc.Invalid) -> str | None:
        if invalid.kind == "oversized":
            return f"codex sent an over-long line ({invalid.reason})"
        if invalid.kind == "unexpected-response":
            _log.debug("response to an unknown request id: %s", jsonrpc.excerpt(invalid.line))
            return None
        text = jsonrpc.excerpt(invalid.line, 200)
        self.noise = [*self.noise[-4:], text]
        _log.debug("ignoring a non-protocol line from codex: %s (%s)", text, invalid.reason)
        return None
