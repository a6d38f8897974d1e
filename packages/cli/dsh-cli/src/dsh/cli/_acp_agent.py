"""The ACP agent behind ``dsh acp``: each ACP session is one dsh agent.

* ``initialize`` always answers (also when the preset is unusable: the problem is
  then the error of ``session/new``, in words that say what to fix); it
  advertises ``loadSession`` only when sessions are persisted, and
  ``_meta.dsh.depthLimit``: this agent honours the depth limit a dsh parent sends.
* ``session/new`` creates an agent whose session records the client's cwd, at the
  delegation depth and under the limit the client sent in ``_meta.dsh`` (else the
  ones in this process's environment, else depth 0); a child already deeper than
  its limit is refused.
* ``session/load`` resumes a persisted session and replays it as updates.
* ``session/prompt`` runs one turn: streamed text becomes ``agent_message_chunk``
  updates (one ``messageId`` per model response), tool calls ``tool_call`` /
  ``tool_call_update``; the agent's own delegations become ``tool_call`` updates
  named ``dsh-run-<run id>`` whose ``_meta.dsh.progress`` carries the nested runs'
  progress items (so a dsh parent sees its grandchildren); usage is tree-wide. The
  stop reason maps ``completed``→``end_turn``, ``max-tokens``→``max_tokens``,
  ``refusal``→``refusal``, ``aborted``→``cancelled``; a turn that ends ``error`` or
  ``blocked`` answers with a JSON-RPC error (-32603) whose message says why.
* ``session/cancel`` and ``$/cancel_request`` of a prompt cancel the running turn.
* ``session/close`` frees a session; sessions idle longer than ``session_idle``
  are closed too, and beyond ``max_sessions`` the least recently used idle one is.

Every other method answers "method not found" (:class:`dsh.acp.AcpAgentBase`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from acp import PROTOCOL_VERSION, RequestError
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    CloseSessionResponse,
    EmbeddedResourceContentBlock,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    SessionCapabilities,
    SessionCloseCapabilities,
    StopReason,
    TextContentBlock,
    TextResourceContents,
    Usage,
)

from dsh.acp import AcpAgentBase, McpServer, PromptBlock
from dsh.cli._acp_updates import SessionUpdates, Update
from dsh.core import Agent as DshAgent
from dsh.core import (
    Context,
    Disposer,
    Event,
    NoModelError,
    PermissionDecision,
    PermissionRequest,
    SessionError,
    TurnOutcome,
)
from dsh.subagent.kit import DelegationRelay, Lineage, RelayWatch, turn_usage

__all__ = ["STOP_REASONS", "DshAcpAgent"]

_log = logging.getLogger("dsh.cli.acp")

STOP_REASONS: dict[str, StopReason] = {
    "completed": "end_turn",
    "max-tokens": "max_tokens",
    "refusal": "refusal",
    "aborted": "cancelled",
}
"""dsh turn stop reason → ACP stop reason (``error`` and ``blocked`` answer with an error)."""

TURN_FAILED = -32603
NOT_CONFIGURED = -32603


@dataclass(eq=False)
class _Session:
    """One ACP session: its agent, and the ordered queue of updates to the client."""

    agent: DshAgent
    updates: asyncio.Queue[Update] = field(default_factory=asyncio.Queue)
    mapping: SessionUpdates = field(init=False)
    """Events as updates, permission requests after their tool call (``_acp_updates``)."""
    pump: asyncio.Task[None] | None = None
    unobserve: Disposer | None = None
    prompting: bool = False
    last_used: float = field(default_factory=time.monotonic)
    relay: RelayWatch | None = None
    """The delegations under this session's agent, relayed as updates."""
    closers: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)
    """What to undo when the session goes: its approver, its MCP servers."""

    def __post_init__(self) -> None:
        self.mapping = SessionUpdates(self.agent, self.updates)


class DshAcpAgent(AcpAgentBase):
    """Serves the agents of one dsh :class:`Context` over ACP.

    ``problem`` (the preset could not be loaded) makes every session request fail
    with that message, while ``initialize`` still answers.
    """

    def __init__(
        self,
        ctx: Context | None,
        *,
        version: str = "0",
        problem: str | None = None,
        max_sessions: int = 256,
        session_idle: float = 1800.0,
    ) -> None:
        self._ctx = ctx
        self._version = version
        self._problem = problem
        self._sessions: dict[str, _Session] = {}
        self._max_sessions = max_sessions
        self._session_idle = session_idle
        self._dsh_client = False
        self._relay: DelegationRelay | None = None
        self._reaper: asyncio.Task[None] | None = None
        if ctx is not None:
            self._relay = DelegationRelay(ctx)
            self._reaper = ctx.spawn(self._reap_idle)

    # -- lifecycle ------------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        """Protocol version 1; ``loadSession`` only with a session store."""
        self._dsh_client = isinstance(kwargs.get("dsh"), dict)
        ctx = self._ctx
        capabilities = AgentCapabilities(
            load_session=ctx is not None and ctx.sessions is not None,
            mcp_capabilities=McpCapabilities(http=True, sse=True),
            prompt_capabilities=PromptCapabilities(image=False, audio=False, embedded_context=True),
            session_capabilities=SessionCapabilities(close=SessionCloseCapabilities()),
            field_meta={"dsh": {"depthLimit": True}},
        )
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=capabilities,
            agent_info=Implementation(name="dsh", title="dsh", version=self._version),
            auth_methods=[],
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        """A new dsh agent whose session records ``cwd`` (see the module docstring)."""
        ctx = self._context()
        _check_cwd(cwd)
        lineage = _lineage(kwargs)
        meta: dict[str, Any] = {"cwd": cwd, "origin": "acp"}
        if lineage is not None:
            refusal = lineage.deeper_than_allowed()
            if refusal is not None:
                raise RequestError.invalid_params({"details": refusal})
            meta.update(lineage.session_meta())
        self._make_room()
        try:
            agent = ctx.agents.create(meta=meta)
        except Exception as exc:
            raise _not_configured(exc) from None
        session = self._attach(agent)
        if mcp_servers:
            try:
                await self._attach_mcp(session, mcp_servers)
            except BaseException:
                await self._close(agent.id, "its MCP servers could not start")
                raise
        return NewSessionResponse(session_id=agent.id)

    async def _attach_mcp(self, session: _Session, servers: list[McpServer]) -> None:
        """Connect the MCP servers the client sent, for this session's agent only; they
        stop when the session does (the ACP spec: agents MUST support stdio servers)."""
        from dsh.tool_mcp import McpError, attach_servers, servers_from_acp

        raw = [server.model_dump(by_alias=True, exclude_none=True) for server in servers]
        try:
            attached = await attach_servers(session.agent, servers_from_acp(raw))
        except McpError as exc:
            raise RequestError.invalid_params({"details": str(exc)}) from None
        session.closers.append(attached.aclose)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[McpServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse | None:
        """Resume a persisted session and replay its history as session updates."""
        ctx = self._context()
        store = ctx.sessions
        if store is None:
            raise RequestError.method_not_found("session/load")
        _check_cwd(cwd)
        session = self._sessions.get(session_id)
        if session is None:
            self._make_room()
            try:
                if not store.exists(session_id):
                    raise RequestError.resource_not_found(session_id)
                agent = ctx.agents.resume(session_id)
            except SessionError as exc:
                raise RequestError.invalid_params(
                    {"sessionId": session_id, "details": str(exc)}
                ) from None
            agent.session.header.meta["cwd"] = cwd
            session = self._attach(agent)
        for event in session.agent.session.events:
            for update in session.mapping.replay(event):
                session.updates.put_nowait(update)
        await session.updates.join()
        return LoadSessionResponse()

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse | None:
        """Cancel the session's turn, close its agent and free it."""
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params(
                {"sessionId": session_id, "details": "unknown session"}
            )
        await self._close(session_id, "the ACP client closed the session")
        return CloseSessionResponse()

    # -- turns --------------------------------------------------------------------------

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        """Run one turn and answer with its stop reason (see the module docstring)."""
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params(
                {"sessionId": session_id, "details": "unknown session: use session/new first"}
            )
        agent = session.agent
        if session.prompting or agent.running:
            raise RequestError.invalid_request(
                {"sessionId": session_id, "details": "a prompt is already running in this session"}
            )
        blocks = _to_dsh_blocks(prompt)
        start = len(agent.session)
        session.prompting = True
        if session.relay is not None:
            session.relay.reset_usage()
        try:
            # continue the caller's trace: W3C traceparent/tracestate from _meta (the acp
            # library spreads _meta keys into kwargs); a no-op unless a tracer is installed
            with agent.ctx.tracing.continue_from(kwargs):
                agent.followup(blocks)
                await agent.when_idle()
        except BaseException:
            agent.cancel("the ACP client went away")
            raise
        finally:
            session.prompting = False
            session.last_used = time.monotonic()
        await session.updates.join()  # every update reaches the client before the answer
        answer = _answer(agent.session.events, start, session)
        try:
            agent.session.flush()  # a turn/end the disk refused: saved now, or the turn failed
        except SessionError as exc:
            raise RequestError(
                TURN_FAILED, f"dsh turn error: {exc}", {"stopReason": "error", "error": str(exc)}
            ) from None
        return answer

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """Cancel the session's running turn (it then answers ``cancelled``)."""
        session = self._sessions.get(session_id)
        if session is not None:
            session.agent.cancel("cancelled by the ACP client")

    def cancel_request(self, method: str, params: Any) -> bool:
        """``$/cancel_request`` of an in-flight request: a prompt's turn is cancelled
        (True: the prompt answers ``cancelled``); any other request is left to the
        transport, which cancels it and answers -32800."""
        if method == "session/prompt" and isinstance(params, dict):
            session = self._sessions.get(str(params.get("sessionId")))
            if session is not None and session.prompting:
                session.agent.cancel("the ACP client cancelled the request")
                return True
        return False

    def cancel_all(self, cause: str) -> None:
        """Cancel every running turn (the client went away, or a signal came)."""
        for session in self._sessions.values():
            session.agent.cancel(cause)

    # -- plumbing -----------------------------------------------------------------------

    def _context(self) -> Context:
        if self._ctx is None:
            raise RequestError(
                NOT_CONFIGURED,
                f"dsh acp is not configured: {self._problem}",
                {"details": self._problem},
            )
        return self._ctx

    def _attach(self, agent: DshAgent) -> _Session:
        assert self._ctx is not None
        session = _Session(agent)
        self._sessions[agent.id] = session

        def observe(event: Event) -> None:
            for update in session.mapping.live(event, self._dsh_client):
                session.updates.put_nowait(update)

        session.unobserve = agent.observe(observe)
        session.pump = session.mapping.pump = self._ctx.spawn(self._pump, agent.id, session)
        if self._relay is not None:
            session.relay = self._relay.watch(agent, session.mapping.relay)
        session.closers.append(session.mapping.close)
        session.closers.append(
            self._ctx.permissions.set_approver(self._approver(agent.id, session), agent=agent)
        )
        return session

    def _approver(self, session_id: str, session: _Session) -> Any:
        """Answers ``ask`` permissions of this session's agent (and its in-process
        children) by asking the ACP client (``session/request_permission``), once the
        call's ``tool_call`` update is out."""

        async def ask(request: PermissionRequest) -> PermissionDecision:
            return await session.mapping.ask(self._conn, session_id, request)

        return ask

    async def _pump(self, session_id: str, session: _Session) -> None:
        """Send a session's updates one by one, in order."""
        while True:
            update = await session.updates.get()
            try:
                await self._conn.session_update(session_id, update)
            except Exception as exc:  # the client went away: drop, keep draining
                _log.debug("session update not delivered: %s", exc)
            finally:
                session.updates.task_done()

    def _make_room(self) -> None:
        if len(self._sessions) < self._max_sessions:
            return
        idle = [s for s in self._sessions.values() if not s.prompting and not s.agent.running]
        if not idle:
            raise RequestError.invalid_request(
                {"details": f"too many sessions ({self._max_sessions} busy); close one first"}
            )
        oldest = min(idle, key=lambda s: s.last_used)
        self._forget(oldest)

    async def _reap_idle(self) -> None:
        period = max(min(self._session_idle / 4, 60.0), 0.05)
        while True:
            await asyncio.sleep(period)
            limit = time.monotonic() - self._session_idle
            for session_id, session in list(self._sessions.items()):
                if (
                    not session.prompting
                    and not session.agent.running
                    and session.last_used < limit
                ):
                    await self._close(session_id, "the session was idle too long")

    async def _close(self, session_id: str, cause: str) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            return
        self._forget(session)
        await session.agent.aclose(cause)
        await _run_closers(session)

    def _forget(self, session: _Session) -> None:
        self._sessions.pop(session.agent.id, None)
        if session.unobserve is not None:
            session.unobserve()
        if session.pump is not None:
            session.pump.cancel()
        if session.relay is not None:
            session.relay.close()
        if not session.agent.running and not session.closers:
            session.agent.close_now()
        else:
            session.agent.cancel("the session was closed")
            assert self._ctx is not None
            self._ctx.spawn(self._finish_forgotten, session)

    async def _finish_forgotten(self, session: _Session) -> None:
        """An evicted session's agent and MCP servers, closed in the background."""
        await session.agent.aclose("the session was closed")
        await _run_closers(session)

    async def aclose(self) -> None:
        """Stop every session's pump and observer, and the idle reaper."""
        if self._relay is not None:
            self._relay.close()
        if self._reaper is not None:
            self._reaper.cancel()
        for session in self._sessions.values():
            if session.unobserve is not None:
                session.unobserve()
            if session.pump is not None:
                session.pump.cancel()
        tasks = [s.pump for s in self._sessions.values() if s.pump is not None]
        if self._reaper is not None:
            tasks.append(self._reaper)
        if tasks:
            await asyncio.wait(tasks)
        for session in self._sessions.values():
            await _run_closers(session)
        self._sessions.clear()


async def _run_closers(session: _Session) -> None:
    closers, session.closers = session.closers, []
    for closer in reversed(closers):
        try:
            outcome = closer()
            if outcome is not None:
                await outcome
        except Exception:
            _log.exception("closing part of session %s failed", session.agent.id)


def _not_configured(exc: BaseException) -> RequestError:
    message = str(exc) or type(exc).__name__
    if isinstance(exc, NoModelError):  # an editor's user fixes it in the editor's settings
        from dsh.cli._models import EDITOR_NO_MODEL_HELP

        message = EDITOR_NO_MODEL_HELP
    return RequestError(
        NOT_CONFIGURED, f"dsh acp cannot start a session: {message}", {"details": message}
    )


def _lineage(kwargs: dict[str, Any]) -> Lineage | None:
    try:
        found = Lineage.from_meta({"dsh": kwargs.get("dsh")})
        return found if found is not None else Lineage.from_env(os.environ)
    except ValueError as exc:
        raise RequestError.invalid_params({"details": str(exc)}) from None


def _check_cwd(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise RequestError.invalid_params({"cwd": cwd, "details": "cwd must be an absolute path"})
    if not os.path.isdir(cwd):
        raise RequestError.invalid_params({"cwd": cwd, "details": "cwd is not a directory"})


def _to_dsh_blocks(prompt: Sequence[PromptBlock]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in prompt:
        if isinstance(block, TextContentBlock):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ResourceContentBlock):
            blocks.append({"type": "text", "text": f"[{block.name}]({block.uri})"})
        elif isinstance(block, EmbeddedResourceContentBlock):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                text = f'<resource uri="{resource.uri}">\n{resource.text}\n</resource>'
            else:
                text = f"[binary resource {resource.uri} omitted]"
            blocks.append({"type": "text", "text": text})
        else:
            raise RequestError.invalid_params(
                {"details": f"dsh acp does not accept {block.type} content (not advertised)"}
            )
    if not blocks:
        raise RequestError.invalid_params({"details": "the prompt is empty"})
    return blocks


def _answer(events: Sequence[Event], start: int, session: _Session) -> PromptResponse:
    outcome: TurnOutcome | None = None
    for index in range(start, len(events)):
        if events[index].type == "turn/end":
            outcome = TurnOutcome.of(events[index])
    if outcome is None:
        raise RequestError(TURN_FAILED, "dsh turn ended without a turn/end event")
    stop = STOP_REASONS.get(outcome.stop_reason)
    if stop is None:
        detail = outcome.error or outcome.stop_reason
        raise RequestError(
            TURN_FAILED,
            f"dsh turn {outcome.stop_reason}: {detail}",
            {"stopReason": outcome.stop_reason, "error": outcome.error},
        )
    total = turn_usage(events, start)
    relay = session.relay
    if relay is not None and relay.runs:
        total = total + relay.usage
    usage = Usage(
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        total_tokens=total.total_tokens,
        cached_read_tokens=total.cached_input_tokens,
        thought_tokens=total.reasoning_tokens,
        field_meta={"dsh": total.to_json()},
    )
    return PromptResponse(stop_reason=stop, usage=usage)
