"""Connection timeouts for ``dsh a2a``: uvicorn's h11 protocol with a header timeout.

uvicorn closes a kept-alive connection that stays idle after a response
(``timeout_keep_alive``), but it has no timer before the first request and none while
a request's headers are arriving: a connection that sends nothing, or a request line
byte by byte (slowloris), is held forever. :func:`protocol_class` returns uvicorn's
h11 protocol with a header timer: armed when the connection opens and at the first
byte of each later request, cancelled when the request's headers are complete; when
it fires the connection is closed (after a ``408`` if part of a request had arrived).
The timer is not reset by further bytes. A silence in the middle of a request body is
:class:`dsh.http_guard.BodyLimit`'s (``408``).

A request answered before its body was read (``413``) leaves the client sending a body
nobody wants; uvicorn reads and discards it (so the client gets to read the answer).
This protocol bounds that: at most ``drain_limit`` bytes, and no silence longer than
the idle timeout, then the connection is closed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["protocol_class"]

_log = logging.getLogger("dsh.a2a")


def _timeout_response(header_timeout: float) -> bytes:
    body = (
        f"dsh a2a: the request headers did not arrive within {header_timeout:g} s"
        " (--header-timeout)\n"
    ).encode()
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


class _GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timer (see the module docstring)."""

    header_timeout: float = 10.0
    idle_timeout: float = 15.0
    drain_limit: int = 16 * 1024 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._drained = 0
        self._drain_timer: asyncio.TimerHandle | None = None
        self.timeout_keep_alive = self.idle_timeout  # type: ignore[assignment]  # call_later takes a float
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        self._stop_draining()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_drain()

    def _discarding(self) -> bool:
        return self.conn.our_state is h11.DONE and self.conn.their_state is h11.SEND_BODY

    def _watch_drain(self) -> None:
        """Bound the discarding of a refused request's body (see the module docstring)."""
        if self._discarding() and not self.transport.is_closing():
            if self._drain_timer is not None:
                self._drain_timer.cancel()
            self._drain_timer = self.loop.call_later(self.idle_timeout, self._close)
        else:
            self._stop_draining()

    def _stop_draining(self) -> None:
        self._drained = 0
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None

    def _close(self) -> None:
        self._drain_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._discarding():
            self._drained += len(data)
            if self._drained > self.drain_limit:
                _log.debug("closing a connection from %s: refused body too long", self.client)
                self._stop_draining()
                self._close()
                return
        super().data_received(data)
        self._watch_drain()
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            self._cancel_header_timer()  # the headers are complete (or the end is near)
        elif self._header_timer is None:
            self._arm_header_timer()  # the first bytes of a request on a kept-alive connection

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._header_timed_out)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        partial, _closed = self.conn.trailing_data
        _log.debug(
            "closing a connection from %s: no complete request headers within %g s",
            self.client,
            self.header_timeout,
        )
        if partial:
            self.transport.write(_timeout_response(self.header_timeout))
        self.transport.close()


def protocol_class(
    *, header_timeout: float, idle_timeout: float, drain_limit: int = 16 * 1024 * 1024
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with these timeouts (for ``uvicorn.Config(http=...)``):
    ``header_timeout`` seconds for a request's headers to arrive (counted from the
    connection's start, or from the first byte of a later request), ``idle_timeout``
    seconds a kept-alive connection may stay idle between requests; at most
    ``drain_limit`` bytes of a refused request's body are read and discarded."""
    return type(
        "DshA2AH11Protocol",
        (_GuardedH11Protocol,),
        {
            "header_timeout": header_timeout,
            "idle_timeout": idle_timeout,
            "drain_limit": drain_limit,
        },
    )
