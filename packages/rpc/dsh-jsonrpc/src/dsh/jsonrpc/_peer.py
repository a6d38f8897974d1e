"""One end of a JSON-RPC connection over newline-delimited JSON (see :class:`Peer`)."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from dsh.jsonrpc._classify import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    classify,
    error_response,
)
from dsh.jsonrpc._errors import PeerClosed, RemoteError
from dsh.jsonrpc._framing import (
    DEFAULT_MAX_LINE_BYTES,
    ByteReader,
    LineReader,
    OversizedLine,
    encode_message,
    excerpt,
)

__all__ = ["ByteWriter", "Invalid", "InvalidHandler", "Peer", "RequestHandler"]

_log = logging.getLogger("dsh.jsonrpc")

_ABANDONED = 1024
"""Ids of requests given up on, remembered so that their late answers are dropped."""

CLOSED_HERE = "the connection was closed"


class ByteWriter(Protocol):
    """Where lines go: ``asyncio.StreamWriter``."""

    def write(self, data: bytes, /) -> None:
        """Queue ``data``."""

    async def drain(self) -> None:
        """Wait until the queue is small again."""

    def is_closing(self) -> bool:
        """True once the stream is closed or closing."""
        ...


@dataclass(frozen=True, slots=True)
class Invalid:
    """A line that is not a message the peer can take: ``kind`` (``parse``: not JSON;
    ``invalid``: JSON but not a JSON-RPC message; ``oversized``: over the cap;
    ``unexpected-response``: an answer to no request sent), the ``line`` (stripped,
    empty for ``oversized``), the ``reason`` in words, and the decoded ``message``
    when there is one."""

    kind: Literal["parse", "invalid", "oversized", "unexpected-response"]
    line: bytes
    reason: str
    message: dict[str, Any] | None = None


RequestHandler = Callable[[dict[str, Any]], Any]
"""Answers a request (the whole message, checked): returns the result (answered at
once, in wire order), or an awaitable of it (answered when it resolves, in a task of
its own, so requests are answered concurrently), or raises :class:`RemoteError`."""

InvalidHandler = Callable[[Invalid], str | None]
"""Decides about a bad line: a reason ends the connection with it, None skips the line."""


@dataclass(slots=True)
class _Call:
    method: str
    future: asyncio.Future[Any]


class Peer:
    """JSON-RPC 2.0 over a byte stream pair, one message per line.

    * :meth:`request` sends a request and waits for its answer (a
      :class:`RemoteError` for an error answer); :meth:`call` sends it and returns
      the future of the answer; :meth:`notify` sends a notification. Ids are
      integers from 0; answers are routed by id, so requests may run concurrently.
    * :meth:`run` (or :meth:`start`, which runs it in a task) reads until the input
      ends, a bad line ends it (``on_invalid``), or :meth:`aclose`. Requests from the
      other side go to ``on_request`` (none: -32601), notifications to
      ``on_notification`` in wire order (an exception there is logged, not fatal).
    * When the connection ends, every pending request fails with
      :class:`PeerClosed` naming the reason, and so does every later one. A write
      that fails loses the output for good (requests fail at once), but reading
      goes on: answers already on their way still arrive.
    * ``send_version`` writes ``"jsonrpc": "2.0"`` on every message (``codex
      app-server`` wants none); ``require_version`` rejects a message without it
      (what a server owes its client; off by default: the member is not looked at).
    * Without ``on_invalid``, any bad line ends the connection.

    ``name`` (``"the agent"``, ``"codex"``) names the other side in reasons.
    """

    def __init__(
        self,
        reader: ByteReader,
        writer: ByteWriter,
        *,
        name: str = "the peer",
        on_request: RequestHandler | None = None,
        on_notification: Callable[[dict[str, Any]], None] | None = None,
        on_invalid: InvalidHandler | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        send_version: bool = True,
        require_version: bool = False,
    ) -> None:
        self.name = name
        self._lines = LineReader(reader, max_line_bytes)
        self._writer = writer
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_invalid = on_invalid
        self._send_version = send_version
        self._require_version = require_version
        self._ids = itertools.count()
        self._pending: dict[int, _Call] = {}
        self._abandoned: dict[int, None] = {}
        self._answering: set[asyncio.Task[None]] = set()
        self._write_lock = asyncio.Lock()
        self._reader: asyncio.Task[Any] | None = None
        self.close_reason: str | None = None
        """Why the connection ended (None while it is open)."""
        self.output_lost: str | None = None
        """Why writing failed (None while it works)."""

    @property
    def closed(self) -> bool:
        """True once the connection has ended."""
        return self.close_reason is not None

    # -- sending -------------------------------------------------------------------------

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its result (cancelling the wait gives it up)."""
        future = await self.call(method, params)
        return await future

    async def call(self, method: str, params: Any = None) -> asyncio.Future[Any]:
        """Send a request; the future of its result. Cancel the future to give it up
        (a late answer is then dropped)."""
        if self.close_reason is not None:
            raise PeerClosed(self.close_reason, method)
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = _Call(method, future)
        future.add_done_callback(lambda done: self._forget(request_id, done))
        message: dict[str, Any] = {"id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self._send(message)
        except PeerClosed as exc:
            future.cancel()
            raise PeerClosed(exc.reason, method) from exc
        except BaseException:
            future.cancel()
            raise
        return future

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (:class:`PeerClosed` if it cannot be written)."""
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    def _framed(self, message: dict[str, Any]) -> bytes:
        if self._send_version:
            return encode_message({"jsonrpc": "2.0", **message})
        return encode_message({k: v for k, v in message.items() if k != "jsonrpc"})

    async def _send(self, message: dict[str, Any]) -> None:
        data = self._framed(message)
        async with self._write_lock:
            if self.output_lost is not None:
                raise PeerClosed(f"cannot write to {self.name}: {self.output_lost}")
            try:
                if self._writer.is_closing():
                    raise ConnectionError("its input is closed")
                self._writer.write(data)
                await self._writer.drain()
            except (ConnectionError, OSError, RuntimeError) as exc:
                self.output_lost = (
                    f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                )
                raise PeerClosed(f"cannot write to {self.name}: {self.output_lost}") from exc

    def _post(self, message: dict[str, Any]) -> None:
        """Queue an answer without waiting (the next send waits for the queue)."""
        if self.output_lost is not None:
            return
        try:
            if not self._writer.is_closing():
                self._writer.write(self._framed(message))
        except (ConnectionError, OSError, RuntimeError) as exc:
            self.output_lost = _describe(exc)

    def _forget(self, request_id: int, future: asyncio.Future[Any]) -> None:
        if self._pending.pop(request_id, None) is not None and future.cancelled():
            self._abandoned[request_id] = None
            if len(self._abandoned) > _ABANDONED:
                del self._abandoned[next(iter(self._abandoned))]

    # -- reading -------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        """Run :meth:`run` in a task of its own (done when the connection has ended)."""
        return asyncio.get_running_loop().create_task(self.run(), name=f"{self.name} reader")

    async def run(self) -> None:
        """Read and dispatch until the connection ends (see the class docstring)."""
        if self._reader is not None:
            raise RuntimeError(f"the connection to {self.name} is already being read")
        self._reader = asyncio.current_task()
        reason: str | None = None
        try:
            while reason is None:
                line = await self._lines.next()
                if line is None:
                    error = self._lines.read_error
                    reason = (
                        f"reading from {self.name} failed: {error}"
                        if error
                        else f"{self.name} closed its output"
                    )
                else:
                    reason = self._dispatch(line)
        finally:
            self._end(reason or CLOSED_HERE)

    def _dispatch(self, line: bytes | OversizedLine) -> str | None:
        frame = classify(line, require_version=self._require_version)
        if frame is None:
            return None
        text = line.strip() if isinstance(line, bytes) else b""
        if frame.kind == "error":
            if isinstance(line, OversizedLine):
                return self._invalid(Invalid("oversized", text, frame.reason))
            code = frame.reply["error"]["code"] if frame.reply is not None else None
            kind: Literal["parse", "invalid"] = "parse" if code == PARSE_ERROR else "invalid"
            return self._invalid(Invalid(kind, text, frame.reason, frame.message))
        message = frame.message
        assert message is not None
        if frame.kind == "response":
            return self._resolve(message, text)
        if frame.kind == "notification":
            if self._on_notification is not None:
                try:
                    self._on_notification(message)
                except Exception:
                    _log.exception("handling a notification from %s failed", self.name)
            return None
        self._answer(message)
        return None

    def _invalid(self, invalid: Invalid) -> str | None:
        if self._on_invalid is not None:
            return self._on_invalid(invalid)
        shown = f": {excerpt(invalid.line)!r}" if invalid.line else ""
        return f"{self.name} sent a bad line ({invalid.reason}){shown}"

    def _resolve(self, message: dict[str, Any], text: bytes) -> str | None:
        request_id = message["id"]
        call = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if call is None:
            if isinstance(request_id, int) and request_id in self._abandoned:
                del self._abandoned[request_id]  # given up on: its answer is dropped
                return None
            why = "an answer to a request it was never sent"
            return self._invalid(Invalid("unexpected-response", text, why, message))
        if call.future.done():
            return None
        if "error" in message:
            error = message["error"]
            call.future.set_exception(
                RemoteError(error["code"], error["message"], error.get("data"), method=call.method)
            )
        else:
            call.future.set_result(message.get("result"))
        return None

    def _answer(self, message: dict[str, Any]) -> None:
        request_id, method = message["id"], message["method"]
        if self._on_request is None:
            self._post(error_response(request_id, METHOD_NOT_FOUND, f"Method not found: {method}"))
            return
        try:
            result = self._on_request(message)
        except Exception as exc:
            self._post(self._failure(request_id, method, exc))
            return
        if inspect.isawaitable(result):
            task = asyncio.get_running_loop().create_task(self._answer_later(message, result))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)
            return
        self._post({"id": request_id, "result": result})

    async def _answer_later(self, message: dict[str, Any], result: Awaitable[Any]) -> None:
        request_id = message["id"]
        try:
            reply = {"id": request_id, "result": await result}
        except Exception as exc:
            reply = self._failure(request_id, message["method"], exc)
        try:
            await self._send(reply)
        except PeerClosed as exc:
            _log.debug("the answer to %s's %s was not sent: %s", self.name, message["method"], exc)

    def _failure(self, request_id: Any, method: str, exc: Exception) -> dict[str, Any]:
        if isinstance(exc, RemoteError):
            return error_response(request_id, exc.code, exc.message, exc.data)
        _log.exception("answering %s's %s request failed", self.name, method)
        return error_response(request_id, INTERNAL_ERROR, f"internal error: {type(exc).__name__}")

    # -- ending --------------------------------------------------------------------------

    def _end(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        pending, self._pending = self._pending, {}
        for call in pending.values():
            if not call.future.done():
                call.future.set_exception(PeerClosed(self.close_reason, call.method))

    async def aclose(self) -> None:
        """End the connection here: pending requests fail, reading and answering stop.
        The streams stay open (they belong to the caller, as the process does)."""
        self._end(CLOSED_HERE)
        current = asyncio.current_task()
        tasks = {t for t in (self._reader, *self._answering) if t is not None and t is not current}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
