"""A strict ACP client connection over an agent process's stdio.

JSON-RPC 2.0, one message per line, through :class:`dsh.jsonrpc.Peer`, with no ACP
library underneath (importing one costs about a second, and a permissive client
hangs on a malformed answer). The first frame that breaks the protocol — a line
that is not JSON, a JSON value that is not a message, an error that is not an error
object, an answer to a request that was never sent, a line over the cap — ends the
connection at once, so every pending request fails fast with a message that says
what the agent wrote. Every request is also raced against the agent's exit (watched
through the process, not the pipes).

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

import anyio

from dsh import jsonrpc
from dsh.core import DshError
from dsh.jsonrpc import Invalid, Peer, PeerClosed, excerpt
from dsh.subagent.kit import redact_secrets
from dsh.subprocess import ChildProcess

__all__ = ["AcpConnection", "LinkError", "LinkFailure", "RemoteError", "RequestHandler"]

_log = logging.getLogger("dsh.subagent_acp")

LinkFailure = Literal["exited", "closed", "protocol", "refused"]
RequestHandler = Callable[[str, Any], Awaitable[Any]]
"""Answers a request from the agent: returns the result, or raises :class:`RemoteError`."""

_LAST_WORDS = 0.5
"""Seconds to wait for an answer the agent wrote just before it exited."""


class LinkError(DshError):
    """An ACP request to the agent failed; ``kind`` says how."""

    def __init__(self, message: str, kind: LinkFailure) -> None:
        super().__init__(message)
        self.message = message
        self.kind: LinkFailure = kind


class RemoteError(DshError, jsonrpc.RemoteError):
    """Raised by a request handler: answered as a JSON-RPC error (``code``, ``message``)."""


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
        self._max = max_line_bytes
        self._skip_garbage = skip_garbage
        self._on_request = on_request
        self.violation: str | None = None
        """What the agent wrote that ended the connection (None: it did not)."""
        self.skipped = 0
        """Non-JSON lines skipped (``stdout_garbage = "skip"``)."""
        self._peer = Peer(
            child.stdout,
            child.stdin,
            name="the agent",
            on_request=self._answer,
            on_notification=on_notification,
            on_invalid=self._invalid,
            max_line_bytes=max_line_bytes,
        )
        self.ended: asyncio.Future[None] = self._peer.start()
        """Done once the connection has ended (end of output, a violation, :meth:`close`)."""

    def _answer(self, message: dict[str, Any]) -> Awaitable[Any]:
        return self._on_request(message["method"], message.get("params"))

    def _invalid(self, invalid: Invalid) -> str | None:
        if invalid.kind == "oversized":
            what = f"a line longer than {self._max} bytes"
        elif invalid.kind == "parse":
            if self._skip_garbage:
                self.skipped += 1
                _log.debug("skipping non-JSON line from the agent: %s", excerpt(invalid.line))
                return None
            what = f"a line that is not JSON: {redact_secrets(excerpt(invalid.line))!r}"
        elif invalid.kind == "unexpected-response":
            what = f"an answer to a request it was never sent: {excerpt(invalid.line)!r}"
        else:
            what = (
                "a JSON line that is not a valid JSON-RPC message:"
                f" {redact_secrets(excerpt(invalid.line))!r}"
            )
        self.violation = (
            f"the agent wrote {what} to its stdout (ACP needs one JSON-RPC message per line)"
        )
        return self.violation

    async def notify(self, method: str, params: Any) -> bool:
        """Send a notification; False if it could not be written (bounded: 1 s)."""
        with anyio.move_on_after(1.0):
            try:
                await self._peer.notify(method, params)
            except PeerClosed as exc:
                _log.debug("notification %s not delivered: %s", method, exc)
                return False
            return True
        return False

    async def request(self, method: str, params: Any) -> Any:
        """Send a request and wait for its answer, the connection's end or the agent's
        exit, whichever comes first; every way it fails is a :class:`LinkError`."""
        call: asyncio.Future[Any] | None = None
        with contextlib.suppress(PeerClosed):
            # a failed write shows in the outcome below (exit, end, violation)
            call = await self._peer.call(method, params)
        try:
            exited = asyncio.ensure_future(self.child.wait())
            try:
                await asyncio.wait(
                    {call or self.ended, exited}, return_when=asyncio.FIRST_COMPLETED
                )
                if call is not None and not call.done():
                    # the agent exited: an answer may still be in the pipe
                    await asyncio.wait({call}, timeout=_LAST_WORDS)
            finally:
                exited.cancel()
            return await self._outcome(call, method)
        finally:
            if call is not None and not call.done():
                call.cancel()

    async def _outcome(self, call: asyncio.Future[Any] | None, what: str) -> Any:
        if call is not None and call.done() and not call.cancelled():
            error = call.exception()
            if error is None:
                return call.result()
            if isinstance(error, jsonrpc.RemoteError):
                raise LinkError(
                    f"the agent answered {what} with error {error.code}"
                    f" ({redact_secrets(error.message)}){_data(error.data)}",
                    "refused",
                )
        if self.violation is not None:
            raise LinkError(f"{self.violation}; {what} got no answer", "protocol")
        if self.ended.done() and self.child.returncode is None:
            # stdout closed: was it the agent exiting? Let it be reaped first.
            with anyio.move_on_after(1.0):
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
        await self._peer.aclose()


def _data(data: Any) -> str:
    if data is None:
        return ""
    rendered = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    if len(rendered) > 300:
        rendered = rendered[:300] + "…"
    return f": {redact_secrets(rendered)}"
