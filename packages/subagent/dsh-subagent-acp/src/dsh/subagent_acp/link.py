"""The ACP connection to one agent process, with every request guarded.

Never await an ACP request bare: a crashed agent, an agent whose stdout a
grandchild still holds open, a frame lost in garbage, or an agent that simply
never answers would hang the caller. :meth:`AgentLink.call` races each request
against the agent's exit (watched by polling its return code, which is set when
the pid is reaped, not when every pipe closes) and an optional deadline, and
turns every way it can fail into a :class:`LinkError` whose message says what
happened.

This module imports ``acp`` (about a second and a half of pydantic model
building), so the provider imports it lazily, off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Literal, TypeVar

import anyio
from acp import PROTOCOL_VERSION, RequestError
from acp.core import ClientSideConnection
from acp.schema import (
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    TextContentBlock,
)
from pydantic import ValidationError

from dsh.subagent.diagnostics import redact_secrets
from dsh.subagent.out_of_process import ChildProcess
from dsh.subagent_acp.client import AcpClient
from dsh.subagent_acp.config import AcpProviderConfig
from dsh.subagent_acp.fold import MessageFold
from dsh.subagent_acp.transport import StrictNdjsonTransport

__all__ = ["AgentLink", "LinkError", "LinkFailure"]

_log = logging.getLogger("dsh.subagent_acp.link")

T = TypeVar("T")

LinkFailure = Literal["exited", "closed", "protocol", "refused", "timeout"]

_EXIT_POLL = 0.02
_LAST_WORDS = 0.5
"""Seconds to wait for a response the agent wrote just before it exited."""


class LinkError(Exception):
    """An ACP request to the agent failed; ``kind`` says how."""

    def __init__(self, message: str, kind: LinkFailure) -> None:
        super().__init__(message)
        self.message = message
        self.kind: LinkFailure = kind


class AgentLink:
    """An ACP client connection over a :class:`ChildProcess`'s stdio."""

    def __init__(self, child: ChildProcess, config: AcpProviderConfig) -> None:
        self.child = child
        self.client = AcpClient(config.permission)
        self.fold = MessageFold()
        self.transport = StrictNdjsonTransport(
            child.stdout,
            child.stdin,
            max_line_bytes=config.max_message_bytes,
            on_garbage=config.stdout_garbage,
        )
        self.conn = ClientSideConnection(self.client, self.transport, observers=[self.fold.observe])
        self._exit: asyncio.Task[int] = asyncio.get_running_loop().create_task(self._watch_exit())
        self.session_id: str | None = None

    async def _watch_exit(self) -> int:
        # Not process.wait(): on CPython 3.11 that resolves only once every pipe is
        # closed, so a grandchild holding stdout would keep it pending after the
        # agent died. The return code is set as soon as the pid is reaped.
        while True:
            code = self.child.returncode
            if code is not None:
                return code
            await asyncio.sleep(_EXIT_POLL)

    # -- requests -------------------------------------------------------------------------

    async def call(self, request: Awaitable[T], what: str, timeout: float | None = None) -> T:
        """Await ``request``; fail with :class:`LinkError` rather than hang."""
        task = asyncio.ensure_future(request)
        try:
            done, _ = await asyncio.wait(
                {task, self._exit}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except BaseException:
            task.cancel()
            raise
        if task in done:
            return await self._outcome(task, what)
        if self._exit in done:
            # A response written just before the exit may still be in the pipe.
            await asyncio.wait({task}, timeout=_LAST_WORDS)
            if task.done() and not task.cancelled():
                return await self._outcome(task, what)
            task.cancel()
            raise LinkError(
                f"the agent exited ({self.child.exit_description()}) before answering {what}",
                "exited",
            )
        task.cancel()
        raise LinkError(f"the agent did not answer {what} within {timeout:g}s", "timeout")

    async def _outcome(self, task: asyncio.Future[T], what: str) -> T:
        try:
            return task.result()
        except RequestError as exc:
            raise LinkError(
                f"the agent answered {what} with error {exc.code} ({exc}){_data(exc.data)}",
                "refused",
            ) from None
        except ValidationError as exc:
            errors = exc.errors()
            problem = str(exc)
            if errors:
                where = ".".join(str(p) for p in errors[0]["loc"]) or "(root)"
                problem = f"{where}: {errors[0]['msg']}"
            raise LinkError(
                f"the agent's answer to {what} is not valid ACP ({problem})", "protocol"
            ) from None
        except (ConnectionError, OSError, EOFError):
            if self.transport.violation is None:
                # The pipe closed: was it the agent exiting? Let it be reaped first.
                await asyncio.wait({self._exit}, timeout=1.0)
            raise self._closed_error(what) from None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise LinkError(
                f"the agent's answer to {what} could not be read ({type(exc).__name__}: {exc})",
                "protocol",
            ) from None

    def _closed_error(self, what: str) -> LinkError:
        violation = self.transport.violation
        if violation is not None:
            return LinkError(f"{violation}; {what} got no answer", "protocol")
        code = self.child.returncode
        if code is not None:
            return LinkError(
                f"the agent exited ({self.child.exit_description()}) before answering {what}",
                "exited",
            )
        return LinkError(
            f"the agent closed its stdout without answering {what} (the process is still running)",
            "closed",
        )

    # -- the protocol steps the provider uses ------------------------------------------

    async def initialize(self, version: str) -> InitializeResponse:
        """``initialize``: no fs/terminal capability; checks the protocol version."""
        response = await self.call(
            self.conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=False, write_text_file=False),
                    terminal=False,
                ),
                client_info=Implementation(name="dsh-subagent-acp", version=version),
            ),
            "initialize",
        )
        if response.protocol_version != PROTOCOL_VERSION:
            raise LinkError(
                f"the agent speaks ACP protocol version {response.protocol_version};"
                f" dsh-subagent-acp speaks version {PROTOCOL_VERSION}",
                "protocol",
            )
        return response

    async def new_session(self, cwd: str) -> str:
        """``session/new`` in ``cwd``; returns the session id (and folds its updates)."""
        response: NewSessionResponse = await self.call(
            self.conn.new_session(cwd=cwd, mcp_servers=[]), "session/new"
        )
        self.session_id = response.session_id
        self.fold.session_id = response.session_id
        return response.session_id

    def prompt(self, texts: list[str], timeout: float | None) -> Awaitable[PromptResponse]:
        """``session/prompt`` with one text block per entry of ``texts`` (guarded)."""
        assert self.session_id is not None
        blocks = [TextContentBlock(type="text", text=text) for text in texts]
        return self.call(
            self.conn.prompt(session_id=self.session_id, prompt=list(blocks)),
            "session/prompt",
            timeout,
        )

    async def cancel(self) -> bool:
        """Send ``session/cancel`` (a notification); False if it could not be sent."""
        self.client.cancel_pending()
        if self.session_id is None:
            return False
        try:
            with anyio.fail_after(1.0):
                await self.conn.cancel(session_id=self.session_id)
        except (TimeoutError, ConnectionError, OSError, RequestError) as exc:
            _log.debug("session/cancel not delivered: %s", exc)
            return False
        return True

    async def close(self) -> None:
        """Close the connection (the agent sees stdin EOF); pending requests fail."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
            try:
                await self.conn.close()
            except Exception:
                _log.debug("closing the ACP connection failed", exc_info=True)
        self._exit.cancel()
        await asyncio.wait({self._exit})


def _data(data: object) -> str:
    if data is None:
        return ""
    text = str(data)
    if len(text) > 300:
        text = text[:300] + "…"
    return f": {redact_secrets(text)}"
