"""The agent side's stdio transport: strict framing that answers every bad frame.

``agent-client-protocol``'s own stdio framing logs and skips lines that are not
JSON (the client gets no answer), lets a JSON line that is not an object kill
its receive loop, stops at a ``null`` line, and reassembles lines of any length.
:class:`StrictAgentTransport` (an ``acp`` message-level ``Transport``) owns the
framing instead:

* a line that is not JSON is answered -32700; anything that is not a JSON-RPC 2.0
  object (an array / batch, a number, ``null``, a request without a method, a
  ``jsonrpc`` other than ``"2.0"``...) -32600; a line beyond the cap is discarded
  and answered -32600; the connection goes on serving;
* a request other than ``initialize`` before ``initialize`` is answered -32600;
* lone UTF-16 surrogates never reach the agent (U+FFFD) and never break a write
  (``\\uXXXX`` escapes; see :mod:`dsh.jsonrpc`);
* ``$/cancel_request`` (``requestId``, or ``id`` as older dsh clients sent it)
  cancels the request it names: the ``on_cancel_request`` callback may cancel it
  gracefully (a prompt's turn, which then answers ``stopReason: "cancelled"``);
  otherwise the request's handler is cancelled and answered -32800;
* a notification whose handler fails is logged in one line, at most
  :data:`LOG_LINES_PER_SECOND` a second (then a count of the suppressed ones);
* a write that fails (the client closed its input, EPIPE) ends the connection:
  ``on_output_lost`` is called once, :meth:`receive` reports end of input, and
  later messages are dropped (requests to the client fail at once);
* :meth:`~StrictAgentTransport.flush` waits until the answer of every request
  whose handler returned is written (``acp`` 1.0 writes answers in tasks of their
  own, which closing the connection cancels).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from acp import RequestError

from dsh.jsonrpc import (
    DEFAULT_MAX_LINE_BYTES,
    INVALID_REQUEST,
    REQUEST_CANCELLED,
    LineReader,
    classify,
    encode_message,
    error_response,
    excerpt,
)

__all__ = ["LOG_LINES_PER_SECOND", "CancelRequestHandler", "Handler", "StrictAgentTransport"]

_log = logging.getLogger("dsh.acp")

CancelRequestHandler = Callable[[str, Any], bool | None]
"""Called with the ``method`` and ``params`` of a request a client cancelled with
``$/cancel_request``; True if it cancelled the request itself (the request then
answers as it sees fit), else the transport cancels the request's handler."""

Handler = Callable[[str, Any, bool], Awaitable[Any]]
"""An ``acp`` connection's method handler: ``(method, params, is_notification)``."""

LOG_LINES_PER_SECOND = 5
"""Failed notifications logged per second at most (the rest are counted)."""

_MAX_TRACKED = 4096

_CURRENT_REQUEST: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "dsh_acp_current_request", default=None
)
"""The key of the request being dispatched. Set by :meth:`StrictAgentTransport.receive`
in the receive loop's context, which the ``acp`` connection copies into the task it
creates for the message right after: so a handler knows its request's id."""


@dataclass(eq=False)
class _InFlight:
    method: str
    params: Any
    request_id: Any
    task: asyncio.Task[Any] | None = None
    cancelled: bool = False
    finished: bool = False  # the handler returned: its answer is due


class StrictAgentTransport:
    """JSON-RPC messages as NDJSON over a ``StreamReader`` / ``StreamWriter`` pair."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        on_cancel_request: CancelRequestHandler | None = None,
        on_message: Callable[[dict[str, Any]], None] | None = None,
        on_output_lost: Callable[[], None] | None = None,
        require_initialize: bool = True,
    ) -> None:
        self._lines = LineReader(reader, max_line_bytes)
        self._on_message = on_message
        self._writer = writer
        self._lock = asyncio.Lock()
        self._in_flight: dict[Any, _InFlight] = {}
        self._on_cancel_request = on_cancel_request
        self._on_output_lost = on_output_lost
        self._initialized = not require_initialize
        self._receiver: asyncio.Task[Any] | None = None
        self._woken = False
        self._answering = 0  # answers on their way out (taken off _in_flight, not yet written)
        self._progress: asyncio.Event | None = None  # set when an answer is due or written
        self._notes = _RateLimitedLog(LOG_LINES_PER_SECOND)
        self.rejected = 0
        """Frames answered with an error by the transport itself."""
        self.closed = False
        self.output_lost: str | None = None
        """Why writing to the client failed (None while it works)."""

    # -- the acp Transport protocol -------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message as a line. Once the output is lost a request raises
        :class:`ConnectionError` (no answer can come); anything else is dropped."""
        if "method" in message or "id" not in message:
            await self._write(message, is_request="id" in message)
            return
        self._in_flight.pop(_key(message.get("id")), None)
        self._answering += 1
        try:
            await self._write(message, is_request=False)
        finally:
            self._answering -= 1
            self._progressed()

    async def _write(self, message: dict[str, Any], *, is_request: bool) -> None:
        if self.output_lost is not None or self.closed:
            if is_request:
                raise ConnectionError(f"the ACP client is gone ({self.output_lost or 'closed'})")
            return
        data = encode_message(message)
        async with self._lock:
            try:
                if self._writer.is_closing():
                    raise ConnectionError("the client's end of the connection is closed")
                self._writer.write(data)
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                self._lose(exc)
                if is_request:
                    raise ConnectionError(f"the ACP client is gone ({self.output_lost})") from exc

    async def receive(self) -> dict[str, Any] | None:
        """The next well-formed message; None at end of input (or once the output is lost)."""
        while True:
            if self.output_lost is not None:
                return None
            line = await self._next_line()
            if line is None:
                return None
            frame = classify(line, require_version=True)
            if frame is None:
                continue
            if frame.kind == "error":
                self.rejected += 1
                if frame.reply is not None:
                    await self.send(frame.reply)
                continue
            message = frame.message
            assert message is not None
            method = message.get("method")
            if frame.kind == "notification" and method == "$/cancel_request":
                self._cancel_request(message.get("params"))
                continue
            if frame.kind == "request" and not self._initialized and method != "initialize":
                self.rejected += 1
                await self.send(_not_initialized(message))
                continue
            if method == "initialize":
                self._initialized = True
            if self._on_message is not None:
                self._on_message(message)
            key = None
            if frame.kind == "request" and len(self._in_flight) < _MAX_TRACKED:
                key = _key(message["id"])
                self._in_flight[key] = _InFlight(str(method), message.get("params"), message["id"])
            _CURRENT_REQUEST.set(key)  # copied into the task that handles this message
            return message

    async def flush(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, until the answer of every request whose
        handler has returned is written and the writer's buffer is empty (the ``acp``
        connection may write an answer in a task of its own, which closing it cancels).
        True once so; False on timeout, or when the output is lost or closed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._answering or any(entry.finished for entry in self._in_flight.values()):
            if self.output_lost is not None or self.closed:
                return False
            self._progress = progress = asyncio.Event()
            try:
                async with asyncio.timeout_at(deadline):
                    await progress.wait()
            except TimeoutError:
                return False
            finally:
                self._progress = None
        while _buffered(self._writer):
            if self.output_lost is not None or loop.time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def close(self) -> None:
        """Close the output (the client sees EOF)."""
        self.closed = True
        self._notes.flush()
        with contextlib.suppress(Exception):
            if not self._writer.is_closing():
                self._writer.close()

    # -- hooks for serve() --------------------------------------------------------------

    def guard(self, handler: Handler) -> Handler:
        """``handler`` (an ``acp`` connection's) wrapped for ``$/cancel_request`` and
        for notifications that fail (logged in one rate-limited line, no traceback)."""

        async def guarded(method: str, params: Any, is_notification: bool) -> Any:
            if is_notification:
                try:
                    return await handler(method, params, True)
                except Exception as exc:
                    self._notes.warn(f"notification {excerpt(method, 60)} failed: {_one_line(exc)}")
                    return None
            key = _CURRENT_REQUEST.get()
            entry = self._in_flight.get(key) if key is not None else None
            task = asyncio.current_task()
            try:
                if entry is not None:
                    if entry.cancelled:
                        raise _cancelled(entry)
                    entry.task = task
                return await handler(method, params, False)
            except asyncio.CancelledError:
                # only our cancel (none from the connection closing): answer it -32800
                if entry is not None and entry.cancelled and task and task.uncancel() == 0:
                    raise _cancelled(entry) from None
                raise
            finally:
                if entry is not None:
                    entry.finished = True
                    self._progressed()

        return guarded

    # -- plumbing -------------------------------------------------------------------

    async def _next_line(self) -> bytes | Any:
        self._receiver = asyncio.current_task()
        try:
            return await self._lines.next()
        except asyncio.CancelledError:
            task = self._receiver
            if self._woken and task is not None and task.uncancel() == 0:
                return None  # woken by _lose: the output is gone
            raise
        finally:
            self._receiver = None

    def _progressed(self) -> None:
        if self._progress is not None:
            self._progress.set()

    def _lose(self, exc: BaseException) -> None:
        """The client can no longer be written to: end the connection."""
        if self.output_lost is not None:
            return
        self.output_lost = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        _log.warning(
            "writing to the ACP client failed (%s): cancelling its requests and ending",
            self.output_lost,
        )
        if self._on_output_lost is not None:
            try:
                self._on_output_lost()
            except Exception as error:
                _log.warning("on_output_lost failed: %s", _one_line(error))
        receiver = self._receiver
        if receiver is not None and receiver is not asyncio.current_task():
            self._woken = True
            receiver.cancel()  # stop waiting for input nobody can be answered for

    def _cancel_request(self, params: Any) -> None:
        if not isinstance(params, dict):
            self._notes.warn("$/cancel_request without params: ignored")
            return
        request_id = params["requestId"] if "requestId" in params else params.get("id")
        if isinstance(request_id, bool) or not isinstance(request_id, int | str):
            self._notes.warn(
                f"$/cancel_request with requestId {excerpt(repr(request_id), 60)}: ignored"
            )
            return
        entry = self._in_flight.get(_key(request_id))
        if entry is None or entry.cancelled:
            return  # answered already (the cancel crossed the answer), or unknown
        if self._on_cancel_request is not None:
            try:
                if self._on_cancel_request(entry.method, entry.params):
                    return  # cancelled gracefully: the request answers by itself
            except Exception as exc:
                self._notes.warn(f"handling $/cancel_request failed: {_one_line(exc)}")
        entry.cancelled = True
        if entry.task is not None and not entry.task.done():
            entry.task.cancel()


class _RateLimitedLog:
    """One warning line per call, at most ``limit`` a second; the rest are counted and
    reported in one line when the second is over."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._window = 0.0
        self._count = 0
        self.suppressed = 0
        self._flush_at: asyncio.TimerHandle | None = None

    def warn(self, line: str) -> None:
        now = time.monotonic()
        if now - self._window >= 1.0:
            self.flush()
            self._window = now
            self._count = 0
        if self._count < self._limit:
            self._count += 1
            _log.warning("%s", line)
            return
        self.suppressed += 1
        if self._flush_at is None:
            with contextlib.suppress(RuntimeError):  # no loop: reported on the next flush
                delay = max(self._window + 1.0 - now, 0.0)
                self._flush_at = asyncio.get_running_loop().call_later(delay, self.flush)

    def flush(self) -> None:
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        if self.suppressed:
            _log.warning("... %d more such lines suppressed", self.suppressed)
            self.suppressed = 0


def _key(request_id: Any) -> Any:
    # JSON-RPC ids 1 and "1" are different requests
    return (type(request_id).__name__, request_id)


def _buffered(writer: asyncio.StreamWriter) -> int:
    """Bytes the writer's transport still holds (0 for one that writes at once)."""
    try:
        return writer.transport.get_write_buffer_size()
    except (NotImplementedError, AttributeError, RuntimeError):
        return 0


def _not_initialized(message: dict[str, Any]) -> dict[str, Any]:
    method = excerpt(str(message.get("method")), 60)
    return error_response(
        message.get("id"),
        INVALID_REQUEST,
        f"not initialized: send initialize before {method}",
        {"method": message.get("method")},
    )


def _cancelled(entry: _InFlight) -> RequestError:
    return RequestError(
        REQUEST_CANCELLED,
        "request cancelled",
        {"requestId": entry.request_id, "method": entry.method},
    )


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return excerpt(f"{type(exc).__name__}: {text}", 300)
