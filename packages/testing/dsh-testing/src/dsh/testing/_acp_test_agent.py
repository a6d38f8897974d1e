"""The ACP agent that the test agents build on: the mock agent, and the small agents
that tests of ACP servers and clients write (see :class:`AcpTestAgent`)."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field
from typing import Any, NoReturn

from acp.schema import (
    Implementation,
    NewSessionResponse,
    PromptResponse,
    SessionModeState,
    TextContentBlock,
)

from dsh.acp import AcpAgentBase, McpServer, PromptBlock, agent_message

__all__ = ["AcpTestAgent", "AcpTestSession", "prompt_text"]


def prompt_text(prompt: list[PromptBlock]) -> str:
    """The text blocks of a ``session/prompt``, joined by spaces."""
    return " ".join(block.text for block in prompt if isinstance(block, TextContentBlock))


@dataclass
class AcpTestSession:
    """A session an :class:`AcpTestAgent` opened."""

    cwd: str
    """The ``cwd`` of ``session/new``."""
    lineage: Any = None
    """The ``_meta.dsh`` of ``session/new`` (None without one)."""
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by ``session/cancel``."""


class AcpTestAgent(AcpAgentBase):
    """An ACP agent for tests, with the four methods every agent implements.

    ``initialize`` is :class:`~dsh.acp.AcpAgentBase`'s (:attr:`protocol_version`,
    :meth:`capabilities`, ``_meta.dsh`` kept in :attr:`init_meta`), with an
    ``agentInfo`` when :attr:`agent_name` is set; ``session/new`` opens an
    :class:`AcpTestSession` named by :meth:`new_session_id` (``s-1``, ``s-2``, ...)
    in :attr:`sessions`, offering :meth:`session_modes`; ``session/cancel`` sets the
    session's ``cancelled`` event; ``session/prompt`` answers ``end_turn``.
    Subclasses override what they script (usually :meth:`prompt`); every other
    method answers "method not found" (:class:`~dsh.acp.AcpAgentBase`).
    """

    agent_name: str | None = None
    """The ``agentInfo`` name (None: no ``agentInfo``)."""
    agent_version = "0"
    """The ``agentInfo`` version."""

    def __init__(self) -> None:
        self.sessions: dict[str, AcpTestSession] = {}
        self.opened = 0

    def agent_info(self) -> Implementation | None:
        """:attr:`agent_name` and :attr:`agent_version` (none without a name)."""
        if self.agent_name is None:
            return None
        return Implementation(name=self.agent_name, version=self.agent_version)

    def new_session_id(self) -> str:
        """The id of the session ``session/new`` opens (:attr:`opened` counts it)."""
        return f"s-{self.opened}"

    def session_modes(self, session_id: str) -> SessionModeState | None:
        """The modes ``session/new`` offers (none by default)."""
        return None

    async def open_session(
        self, cwd: str, mcp_servers: list[McpServer], meta: dict[str, Any]
    ) -> NewSessionResponse:
        """See the class docstring."""
        self.opened += 1
        session_id = self.new_session_id()
        self.sessions[session_id] = AcpTestSession(cwd, meta.get("dsh"))
        modes = self.session_modes(session_id)
        return NewSessionResponse(session_id=session_id, modes=modes)

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        """``end_turn``."""
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """Set the session's ``cancelled`` event."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancelled.set()

    async def say(self, session_id: str, text: str, message_id: str | None = None) -> None:
        """Stream ``text`` as an ``agent_message_chunk``."""
        await self._conn.session_update(session_id, agent_message(text, message_id))

    async def crash(self, session_id: str, who: str) -> NoReturn:
        """Say ``about to crash``, write ``<who>: crashing on purpose`` to stderr and
        exit with status 3."""
        await self.say(session_id, "about to crash")
        await asyncio.sleep(0.05)
        sys.stderr.write(f"{who}: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)
