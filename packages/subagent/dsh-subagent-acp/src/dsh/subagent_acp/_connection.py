"""A strict ACP client connection over an agent process's stdio.

JSON-RPC 2.0, one message per line, with no ACP library underneath (importing one
costs about a second, and a permissive client hangs on a malformed answer): every
line goes through :func:`dsh.acp.classify`, and the first frame that breaks the
protocol — a line that is not JSON, a JSON value that is not a message, an error
that is not an error object, an answer to a request that was never sent, a line
over the cap — ends the connection at once, so every pending request fails fast
with a message that says what the agent wrote. Every request is also raced against
the agent's exit (watched through the process, not the pipes).

Requests from the agent (``session/request_permission``, ``fs/*``, ``terminal/*``)
are answered by a handler; notifications (``session/update``) go to an observer in
wire order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from dsh.acp import PARSE_ERROR, LineReader, OversizedLine, classify, error_response, excerpt
from dsh.subagent.kit import redact_secrets
from dsh.subprocess import ChildProcess

__all__ = ["AcpConnection", "LinkError", "LinkFailure", "RequestHandler"]

_log = logging.getLogger("dsh.subagent_acp")

LinkFailure = Literal["exited", "closed", "protocol", "refused"]
RequestHandler = Callable[[str, Any], Awaitable[Any]]
"""Answers a request from the agent: returns the result, or raises :class:`RemoteError`."""

_LAST_WORDS = 0.5
"""Seconds to wait for an answer the agent wrote just before it exited."""


class LinkError(Exception):
    """An ACP request to the agent failed; ``kind`` says how."""

    def __init__(self, message: str, kind: LinkFailure) -> None:
        super().__init__(message)
        self.message = message
        self.kind: LinkFailure = kind


class RemoteError(Exception):
    """Raised by a request handler: answered as a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class AcpConnection:
    """JSON-RPC over the agent's stdin/stdout (see the module docstring)."""

    def __init__(
        self,
        child: ChildProcess,
        *,
        max_line_bytes: int,
        skip_garbage: bool,
        on_notification: Callable[[dict[str, Any]], None],
        on_request: RequestHandler,
    ) -> None:
        self.child = child
        self._lines = LineReader(child.stdout, max_line_bytes)
        self._max = max_line_bytes
        self._skip_garbage = skip_garbage
        self._on_notification = on_notification
        self._on_request = on_request
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._write_lock = asyncio.Lock()
        self._answering: set[asyncio.Task[None]] = set()
        self.violation: str | None = None
        """What the agent wrote that ended the connection (None: it did not)."""
        self.skipped = 0
        """Non-JSON lines skipped (``stdout_garbage = "skip"``)."""
        self.ended = asyncio.get_running_loop().create_future()
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    # -- reading -----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            while self.violation is None:
                line = await self._lines.next()
                if line is None:
                    break
                self._handle_line(line)
        finally:
            if not self.ended.done():
                self.ended.set_result(None)
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("the connection ended"))

    def _handle_line(self, line: bytes | OversizedLine) -> None:
        frame = classify(line)
        if frame is None:
            return
        if frame.kind == "error":
            reply = frame.reply
            if isinstance(line, OversizedLine):
                self._violate(f"a line longer than {self._max} bytes")
            elif reply is not None and reply["error"]["code"] == PARSE_ERROR:
                if self._skip_garbage:
                    self.skipped += 1
                    _log.debug("skipping non-JSON line from the agent: %s", excerpt(line))
                    return
                self._violate(f"a line that is not JSON: {redact_secrets(excerpt(line.strip()))!r}")
            else:
                self._violate(
                    "a JSON line that is not a valid JSON-RPC message:"
                    f" {redact_secrets(excerpt(line.strip()))!r}"
                )
            return
        message = frame.message
        assert message is not None
        if frame.kind == "response":
            self._resolve(message, line)
        elif frame.kind == "notification":
            try:
                self._on_notification(message)
            except Exception:
                _log.exception("handling a notification from the agent failed")
        else:
            task = asyncio.get_running_loop().create_task(self._answer(message))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)

    def _resolve(self, message: dict[str, Any], line: bytes | OversizedLine) -> None:
        request_id = message["id"]
        future = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if future is None:
            text = excerpt(line.strip()) if isinstance(line, bytes) else ""
            self._violate(f"an answer to a request it was never sent: {text!r}")
            return
        if future.done():
            return
        if "error" in message:
            error = message["error"]
            future.set_exception(RemoteError(error["code"], error["message"], error.get("data")))
        else:
            future.set_result(message.get("result"))

    def _violate(self, what: str) -> None:
        if self.violation is None:
            self.violation = (
                f"the agent wrote {what} to its stdout (ACP needs one JSON-RPC message per line)"
            )

    async def _answer(self, message: dict[str, Any]) -> None:
        method, request_id = message["method"], message["id"]
        try:
            result = await self._on_request(method, message.get("params"))
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": result}
        except RemoteError as exc:
            reply = error_response(request_id, exc.code, exc.message)
        except Exception as exc:
            _log.exception("answering the agent's %s request failed", method)
            reply = error_response(request_id, -32603, f"internal error: {type(exc).__name__}")
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            await self._write(reply)

    # -- writing ----------------------------------------------------------------------

    async def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        stdin = self.child.stdin
        async with self._write_lock:
            if stdin.is_closing():
                raise ConnectionError("the agent's stdin is closed")
            stdin.write(data)
            await stdin.drain()

    async def notify(self, method: str, params: Any) -> bool:
        """Send a notification; False if it could not be written (bounded: 1 s)."""
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._write({"jsonrpc": "2.0", "method": method, "params": params})
                    return True
        except (ConnectionError, OSError, RuntimeError) as exc:
            _log.debug("notification %s not delivered: %s", method, exc)
        return False

    async def request(self, method: str, params: Any) -> Any:
        """Send a request and wait for its answer, the connection's end or the agent's
        exit, whichever comes first; every way it fails is a :class:`LinkError`."""
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                # a failed write shows in the outcome below (exit, end, violation)
                await self._write(
                    {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
                )
            exited = asyncio.ensure_future(self.child.wait())
            try:
                await asyncio.wait({future, exited}, return_when=asyncio.FIRST_COMPLETED)
                if not future.done():  # the agent exited: an answer may still be in the pipe
                    await asyncio.wait({future}, timeout=_LAST_WORDS)
            finally:
                exited.cancel()
            return await self._outcome(future, method)
        finally:
            self._pending.pop(request_id, None)
            if not future.done():
                future.cancel()

    async def _outcome(self, future: asyncio.Future[Any], what: str) -> Any:
        if future.done() and not future.cancelled():
            error = future.exception()
            if error is None:
                return future.result()
            if isinstance(error, RemoteError):
                raise LinkError(
                    f"the agent answered {what} with error {error.code}"
                    f" ({redact_secrets(error.message)}){_data(error.data)}",
                    "refused",
                )
        if self.violation is not None:
            raise LinkError(f"{self.violation}; {what} got no answer", "protocol")
        if self.ended.done() and self.child.returncode is None:
            # stdout closed: was it the agent exiting? Let it be reaped first.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.child.wait()
        if self.child.returncode is not None:
            raise LinkError(
                f"the agent exited ({self.child.exit_description()}) before answering {what}",
                "exited",
            )
        raise LinkError(
            f"the agent closed its stdout without answering {what} (the process is still running)",
            "closed",
        )

    async def close(self) -> None:
        """Stop reading and answering (the process is the caller's to stop)."""
        self._reader.cancel()
        for task in list(self._answering):
            task.cancel()
        await asyncio.wait({self._reader, *self._answering})


def _data(data: Any) -> str:
    if data is None:
        return ""
    rendered = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    if len(rendered) > 300:
        rendered = rendered[:300] + "…"
    return f": {redact_secrets(rendered)}"
