"""The agent side's stdio transport: strict framing that answers every bad frame.

``agent-client-protocol``'s own stdio framing logs and skips lines that are not
JSON (the client gets no answer), lets a JSON line that is not an object kill
its receive loop, stops at a ``null`` line, and reassembles lines of any length.
:class:`StrictAgentTransport` (an ``acp`` message-level ``Transport``) owns the
framing instead: a line that is not JSON is answered -32700, anything that is not
a JSON-RPC object (an array / batch, a number, ``null``, a request without a
method...) -32600, a line beyond the cap is discarded and answered -32600; the
connection goes on serving. ``$/cancel_request`` notifications are handed to a
callback with the method and params of the request they name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from dsh.acp._framing import DEFAULT_MAX_LINE_BYTES, LineReader, classify

__all__ = ["CancelRequestHandler", "StrictAgentTransport"]

_log = logging.getLogger("dsh.acp")

CancelRequestHandler = Callable[[str, Any], None]
"""Called with the ``method`` and ``params`` of a request a client cancelled with
``$/cancel_request``."""

_MAX_TRACKED = 4096


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
    ) -> None:
        self._lines = LineReader(reader, max_line_bytes)
        self._on_message = on_message
        self._writer = writer
        self._lock = asyncio.Lock()
        self._in_flight: dict[Any, tuple[str, Any]] = {}
        self._on_cancel_request = on_cancel_request
        self.rejected = 0
        """Frames answered with an error by the transport itself."""
        self.closed = False

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message as a line."""
        if "method" not in message and "id" in message:
            self._in_flight.pop(_key(message.get("id")), None)
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with self._lock:
            if self._writer.is_closing():
                raise ConnectionError("the client's end of the connection is closed")
            self._writer.write(data)
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        """The next well-formed message; None at end of input."""
        while True:
            line = await self._lines.next()
            if line is None:
                return None
            frame = classify(line)
            if frame is None:
                continue
            if frame.kind == "error":
                self.rejected += 1
                if frame.reply is not None:
                    with contextlib.suppress(ConnectionError, OSError):
                        await self.send(frame.reply)
                continue
            message = frame.message
            assert message is not None
            if frame.kind == "notification" and message["method"] == "$/cancel_request":
                self._cancel_request(message.get("params"))
                continue
            if self._on_message is not None:
                self._on_message(message)
            if frame.kind == "request" and len(self._in_flight) < _MAX_TRACKED:
                self._in_flight[_key(message["id"])] = (message["method"], message.get("params"))
            return message

    async def close(self) -> None:
        """Close the output (the client sees EOF)."""
        self.closed = True
        with contextlib.suppress(Exception):
            if not self._writer.is_closing():
                self._writer.close()

    def _cancel_request(self, params: Any) -> None:
        if not isinstance(params, dict) or "id" not in params:
            return
        found = self._in_flight.get(_key(params["id"]))
        if found is None or self._on_cancel_request is None:
            return
        try:
            self._on_cancel_request(*found)
        except Exception:
            _log.exception("handling $/cancel_request failed")


def _key(request_id: Any) -> Any:
    # JSON-RPC ids 1 and "1" are different requests
    return (type(request_id).__name__, request_id)
