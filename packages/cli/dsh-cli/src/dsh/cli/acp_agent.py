"""The ACP agent behind ``dsh acp``: each ACP session is one dsh agent.

* ``initialize`` advertises ``loadSession`` only when sessions are persisted.
* ``session/new`` creates an agent whose session records the client's cwd.
* ``session/load`` resumes a persisted session and replays it as updates.
* ``session/prompt`` runs one turn: the agent's streamed text becomes
  ``agent_message_chunk`` updates (one ``messageId`` per model response), its
  tool calls ``tool_call`` / ``tool_call_update`` updates; the stop reason maps
  ``completed``→``end_turn``, ``max-tokens``→``max_tokens``,
  ``refusal``→``refusal``, ``aborted``→``cancelled``. A turn that ends
  ``error`` or ``blocked`` answers the prompt with a JSON-RPC error (-32603)
  whose message carries the reason: clients show it as a failed turn, and a
  delegating dsh maps it to stop reason ``error`` instead of mistaking the
  error text for an answer.
* ``session/cancel`` cancels the running turn.

Every other ``acp.Agent`` method answers "method not found" (inherited from
:class:`dsh.subagent_acp.agent_side.AcpAgentBase`): no modes, config options,
auth methods, fork, resume (``session/load`` replays instead), close, list or
extension methods.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import (
    AgentCapabilities,
    AgentMessageChunk,
    ClientCapabilities,
    EmbeddedResourceContentBlock,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    StopReason,
    TextContentBlock,
    TextResourceContents,
    ToolCallProgress,
    ToolCallStart,
    Usage,
    UserMessageChunk,
)

from dsh.core import Agent as DshAgent
from dsh.core import Context, Disposer, Event, SessionError, TurnOutcome, text_of
from dsh.subagent_acp.agent_side import AcpAgentBase, McpServer, PromptBlock

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

Update = AgentMessageChunk | UserMessageChunk | ToolCallStart | ToolCallProgress


@dataclass(eq=False)
class _Session:
    """One ACP session: its agent, and the ordered queue of updates to the client."""

    agent: DshAgent
    updates: asyncio.Queue[Update] = field(default_factory=asyncio.Queue)
    pump: asyncio.Task[None] | None = None
    unobserve: Disposer | None = None
    prompting: bool = False


class DshAcpAgent(AcpAgentBase):
    """Serves the agents of one dsh :class:`Context` over ACP."""

    def __init__(self, ctx: Context, *, version: str = "0") -> None:
        self._ctx = ctx
        self._version = version
        self._sessions: dict[str, _Session] = {}

    # -- lifecycle ------------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        """Protocol version 1; ``loadSession`` only with a session store."""
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=self._ctx.sessions is not None,
                prompt_capabilities=PromptCapabilities(
                    image=False, audio=False, embedded_context=True
                ),
            ),
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
        """A new dsh agent whose session records ``cwd``."""
        _check_cwd(cwd)
        if mcp_servers:
            _log.warning("dsh acp does not connect to MCP servers; ignoring %d", len(mcp_servers))
        agent = self._ctx.agents.create(meta={"cwd": cwd, "origin": "acp"})
        self._attach(agent)
        return NewSessionResponse(session_id=agent.id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[McpServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse | None:
        """Resume a persisted session and replay its history as session updates."""
        store = self._ctx.sessions
        if store is None:
            raise RequestError.method_not_found("session/load")
        _check_cwd(cwd)
        session = self._sessions.get(session_id)
        if session is None:
            try:
                if not store.exists(session_id):
                    raise RequestError.resource_not_found(session_id)
                agent = self._ctx.agents.resume(session_id)
            except SessionError as exc:
                raise RequestError.invalid_params(
                    {"sessionId": session_id, "details": str(exc)}
                ) from None
            agent.session.header.meta["cwd"] = cwd
            session = self._attach(agent)
        for event in session.agent.session.events:
            for update in _replay(event):
                session.updates.put_nowait(update)
        await session.updates.join()
        return LoadSessionResponse()

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
        try:
            agent.followup(blocks)
            await agent.when_idle()
        except BaseException:
            agent.cancel("the ACP client went away")
            raise
        finally:
            session.prompting = False
        await session.updates.join()  # every update reaches the client before the answer
        return _answer(agent.session.events, start)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """Cancel the session's running turn (it then answers ``cancelled``)."""
        session = self._sessions.get(session_id)
        if session is not None:
            session.agent.cancel("cancelled by the ACP client")

    # -- plumbing -----------------------------------------------------------------------

    def _attach(self, agent: DshAgent) -> _Session:
        session = _Session(agent)
        self._sessions[agent.id] = session

        def observe(event: Event) -> None:
            for update in _live(agent, event):
                session.updates.put_nowait(update)

        session.unobserve = agent.observe(observe)
        session.pump = self._ctx.spawn(self._pump, agent.id, session)
        return session

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

    async def aclose(self) -> None:
        """Stop every session's pump and observer."""
        for session in self._sessions.values():
            if session.unobserve is not None:
                session.unobserve()
            if session.pump is not None:
                session.pump.cancel()
        pumps = [s.pump for s in self._sessions.values() if s.pump is not None]
        if pumps:
            await asyncio.wait(pumps)
        self._sessions.clear()


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


def _message_id(seq: int) -> str:
    return f"m{seq}"


def _live(agent: DshAgent, event: Event) -> list[Update]:
    """Updates for an event of a running turn."""
    if event.seq == -1:
        if event.type == "assistant/delta":
            text = event.data.get("text")
            if text:
                # the assistant/message these deltas build will get the next seq
                update = update_agent_message_text(str(text))
                update.message_id = _message_id(len(agent.session))
                return [update]
        return []
    if event.type in ("tool/call", "tool/result"):
        return _replay(event)
    return []


def _replay(event: Event) -> list[Update]:
    """Updates that replay a stored event."""
    data = event.data
    if event.type == "user/message":
        text = text_of(data.get("content"))
        return [update_user_message_text(text)] if text else []
    if event.type == "assistant/message":
        text = text_of(data.get("content"))
        if not text:
            return []
        update = update_agent_message_text(text)
        update.message_id = _message_id(event.seq)
        return [update]
    if event.type == "tool/call":
        name = str(data.get("name", "tool"))
        return [
            start_tool_call(
                str(data.get("id")),
                name,
                kind="other",
                status="pending",
                raw_input=data.get("arguments"),
            )
        ]
    if event.type == "tool/result":
        failed = bool(data.get("is_error"))
        content = text_of(data.get("content"))
        return [
            update_tool_call(
                str(data.get("call_id")),
                status="failed" if failed else "completed",
                content=[tool_content(text_block(content))] if content else None,
            )
        ]
    return []


def _answer(events: Sequence[Event], start: int) -> PromptResponse:
    outcome: TurnOutcome | None = None
    input_tokens = output_tokens = 0
    for index in range(start, len(events)):
        event = events[index]
        if event.type == "assistant/message":
            usage = event.data.get("usage") or {}
            input_tokens += int(usage.get("input_tokens", 0))
            output_tokens += int(usage.get("output_tokens", 0))
        elif event.type == "turn/end":
            outcome = TurnOutcome.of(event)
            break
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
    usage = Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )
    return PromptResponse(stop_reason=stop, usage=usage)
