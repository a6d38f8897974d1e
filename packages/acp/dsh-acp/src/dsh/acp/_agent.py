"""The ACP agent behind ``dsh acp``: each ACP session is one dsh agent.

* ``initialize`` always answers (also when the preset is unusable: the problem is
  then the error of ``session/new``, in words that say what to fix); it
  advertises ``loadSession`` only when sessions are persisted, and
  ``_meta.dsh.depthLimit``: this agent honours the depth limit a dsh parent sends;
  ``_meta.dsh.budget`` (with the subagent runtime loaded): it enforces the budget a
  dsh parent sends.
* ``session/new`` creates an agent whose session records the client's cwd, at the
  delegation depth and under the limit the client sent in ``_meta.dsh`` (else the
  ones in this process's environment, else depth 0); a child already deeper than
  its limit is refused. A budget in ``_meta.dsh.budget`` puts the agent and
  everything it delegates under it (``ctx.subagents.budget_tree``).
* ``session/load`` resumes a persisted session and replays it as updates.
* ``session/prompt`` runs one turn: streamed text becomes ``agent_message_chunk``
  updates (one ``messageId`` per model response), tool calls ``tool_call`` /
  ``tool_call_update``; the agent's own delegations become ``tool_call`` updates
  named ``dsh-run-<run id>`` whose ``_meta.dsh.progress`` carries the nested runs'
  progress items (so a dsh parent sees its grandchildren); usage is tree-wide. The
  stop reason maps ``completed``→``end_turn``, ``max-tokens``→``max_tokens``,
  ``refusal``→``refusal``, ``aborted``→``cancelled``; a turn stopped at its budget
  answers ``cancelled`` with ``_meta.dsh = {stopReason: "budget", diagnostic}``
  (the cap, the limit, what was spent); a turn that ends ``error`` or
  ``blocked`` answers with a JSON-RPC error (-32603) whose message says why.
* ``session/cancel`` and ``$/cancel_request`` of a prompt cancel the running turn.
* ``session/close`` frees a session; sessions idle longer than ``session_idle``
  are closed too, and beyond ``max_sessions`` the least recently used idle one is.

Every other method answers "method not found" (:class:`dsh.acp.AcpAgentBase`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from acp import RequestError
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    CloseSessionResponse,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
)

from dsh.acp._agent_base import AcpAgentBase, McpServer, PromptBlock
from dsh.acp._client_workspace import client_tools
from dsh.acp._requests import (
    NOT_CONFIGURED,
    TURN_FAILED,
    answer,
    check_cwd,
    lineage,
    not_configured,
    to_dsh_blocks,
)
from dsh.acp._session import Session, run_closers
from dsh.core import Agent as DshAgent
from dsh.core import Context, DshError, PermissionDecision, PermissionRequest
from dsh.core.sessions import Event, SessionError
from dsh.subagent.kit import DelegationRelay

__all__ = ["DshAcpAgent"]

_log = logging.getLogger("dsh.acp")


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
        workspace: str = "own",
    ) -> None:
        self._ctx = ctx
        self._workspace = workspace
        """``client``: new sessions' file and shell tools go through the client's
        ``fs`` and ``terminal`` where it offers them (:mod:`._client_workspace`)."""
        self._client_caps: dict[str, Any] = {}
        self._version = version
        self._problem = problem
        self._sessions: dict[str, Session] = {}
        self._max_sessions = max_sessions
        self._session_idle = session_idle
        self._relay: DelegationRelay | None = None
        self._reaper: asyncio.Task[None] | None = None
        if ctx is not None:
            self._relay = DelegationRelay(ctx)
            self._reaper = ctx.spawn(self._reap_idle)

    # -- lifecycle ------------------------------------------------------------------------

    def capabilities(self) -> AgentCapabilities:
        """``loadSession`` only with a session store; ``_meta.dsh.depthLimit``."""
        ctx = self._ctx
        return AgentCapabilities(
            load_session=ctx is not None and ctx.sessions is not None,
            mcp_capabilities=McpCapabilities(http=True, sse=True),
            prompt_capabilities=PromptCapabilities(image=False, audio=False, embedded_context=True),
            session_capabilities=SessionCapabilities(close=SessionCloseCapabilities()),
            field_meta={"dsh": {"depthLimit": True, "budget": self._budgets()}},
        )

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        """:class:`AcpAgentBase`'s, keeping the client's capabilities."""
        if client_capabilities is not None:
            self._client_caps = client_capabilities.model_dump(by_alias=True, exclude_none=True)
        return await super().initialize(
            protocol_version, client_capabilities, client_info, **kwargs
        )

    def _budgets(self) -> bool:
        """This agent enforces a budget (its context has the subagent runtime)."""
        return self._ctx is not None and self._ctx.has_service("subagents")

    def agent_info(self) -> Implementation:
        """``dsh`` and this version."""
        return Implementation(name="dsh", title="dsh", version=self._version)

    async def open_session(
        self, cwd: str, mcp_servers: list[McpServer], meta: dict[str, Any]
    ) -> NewSessionResponse:
        """A new dsh agent whose session records ``cwd`` (see the module docstring)."""
        ctx = self._context()
        check_cwd(cwd)
        found = lineage(meta)
        session_meta: dict[str, Any] = {"cwd": cwd, "origin": "acp"}
        if found is not None:
            refusal = found.deeper_than_allowed()
            if refusal is not None:
                raise RequestError.invalid_params({"details": refusal})
            session_meta.update(found.session_meta())
        self._make_room()
        try:
            agent = ctx.agents.create(meta=session_meta)
        except Exception as exc:
            raise not_configured(exc) from None
        if self._workspace == "client":
            self._use_client_workspace(agent, cwd)
        session = self._attach(agent)
        if found is not None and found.budget is not None and self._budgets():
            try:
                session.closers.append(ctx.subagents.budget_tree(agent, found.budget))
            except (DshError, ValueError) as exc:
                await self._close(agent.id, "its budget could not be enforced")
                raise RequestError.invalid_params({"details": str(exc)}) from None
        if mcp_servers:
            try:
                await self._attach_mcp(session, mcp_servers)
            except BaseException:
                await self._close(agent.id, "its MCP servers could not start")
                raise
        return NewSessionResponse(session_id=agent.id)

    async def _attach_mcp(self, session: Session, servers: list[McpServer]) -> None:
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
        check_cwd(cwd)
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
        ctx = agent.ctx
        if session.prompting or agent.running:
            raise RequestError.invalid_request(
                {"sessionId": session_id, "details": "a prompt is already running in this session"}
            )
        blocks = to_dsh_blocks(prompt)
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
        meter = ctx.subagents.budget_meter(agent) if self._budgets() else None
        verdict = meter.verdict() if meter is not None else None
        result = answer(agent.session.events, start, session.relay, verdict)
        try:
            agent.session.flush()  # a turn/end the disk refused: saved now, or the turn failed
        except SessionError as exc:
            raise RequestError(
                TURN_FAILED, f"dsh turn error: {exc}", {"stopReason": "error", "error": str(exc)}
            ) from None
        return result

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

    def _use_client_workspace(self, agent: DshAgent, cwd: str) -> None:
        """Give ``agent`` the client-backed file and shell tools the client can serve,
        hiding the registered ones of the same names."""
        assert self._ctx is not None
        tools = client_tools(
            self._ctx.tools.get, self._client_caps, self._conn.request, agent.id, cwd
        )
        if not tools:
            return
        agent.tools.view = agent.tools.view.narrow(deny=[tool.name for tool in tools])
        for tool in tools:
            agent.tools.add(tool)

    def _context(self) -> Context:
        if self._ctx is None:
            raise RequestError(
                NOT_CONFIGURED,
                f"dsh acp is not configured: {self._problem}",
                {"details": self._problem},
            )
        return self._ctx

    def _attach(self, agent: DshAgent) -> Session:
        assert self._ctx is not None
        session = Session(agent)
        self._sessions[agent.id] = session

        def observe(event: Event) -> None:
            for update in session.mapping.live(event, isinstance(self.init_meta, dict)):
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

    def _approver(self, session_id: str, session: Session) -> Any:
        """Answers ``ask`` permissions of this session's agent (and its in-process
        children) by asking the ACP client (``session/request_permission``), once the
        call's ``tool_call`` update is out."""

        async def ask(request: PermissionRequest) -> PermissionDecision:
            return await session.mapping.ask(self._conn, session_id, request)

        return ask

    async def _pump(self, session_id: str, session: Session) -> None:
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
        await run_closers(session)

    def _forget(self, session: Session) -> None:
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

    async def _finish_forgotten(self, session: Session) -> None:
        """An evicted session's agent and MCP servers, closed in the background."""
        await session.agent.aclose("the session was closed")
        await run_closers(session)

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
            await run_closers(session)
        self._sessions.clear()
