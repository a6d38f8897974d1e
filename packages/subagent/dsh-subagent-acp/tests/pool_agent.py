"""An ACP agent that tells the pool tests who served them (run as a child process).

    python pool_agent.py [--no-close]

It advertises ``session/close`` (unless ``--no-close``) and answers each prompt by
its first word:

``who``
    a JSON object: this process's ``pid``, the ``session`` id, the session's
    ``cwd``, ``open`` (sessions open now, this one included), ``total`` (sessions
    ever created), ``closed`` (ids closed so far), the ``lineage`` the session got in
    ``_meta.dsh``, the process's ``DSH_DELEGATION_DEPTH`` (or null) and the
    ``initialize`` ``_meta``, the ``instance`` (a random id of this process: its pid
    is its sandbox's) and the ``sandbox`` policy it got (``DSH_SANDBOX``, or null);
``snoop NAME``
    a JSON object: ``found``, the pids whose ``/proc/<pid>/environ`` this process can
    read and that hold a variable ``NAME`` (a parent's secret), and ``visible``, how
    many processes it sees;
``hang``
    says ``working on it`` and waits for ``session/cancel`` (answers ``cancelled``);
``crash``
    says ``about to crash`` and exits with status 3;
``fail``
    answers the prompt with a JSON-RPC error;
anything else
    ``echo: <text>``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

from acp import PROTOCOL_VERSION, RequestError
from acp.schema import (
    AgentCapabilities,
    AgentMessageChunk,
    ClientCapabilities,
    CloseSessionResponse,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    TextContentBlock,
)

from dsh.acp import AcpAgentBase, McpServer, PromptBlock, serve_stdio

INSTANCE = uuid.uuid4().hex


def snoop(name: str) -> dict[str, Any]:
    """What this process can read of other processes' environments (see ``snoop``)."""
    needle = name.encode() + b"="
    found, visible = [], 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        visible += 1
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                names = handle.read().split(b"\0")
        except OSError:
            continue
        if any(item.startswith(needle) for item in names):
            found.append(int(entry))
    return {"found": found, "visible": visible}


class PoolAgent(AcpAgentBase):
    """See the module docstring."""

    def __init__(self, closes: bool) -> None:
        self.closes = closes
        self.sessions: dict[str, dict[str, Any]] = {}
        self.closed: list[str] = []
        self.total = 0
        self.init_meta: Any = None

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self.init_meta = kwargs.get("dsh")
        session = SessionCapabilities(close=SessionCloseCapabilities()) if self.closes else None
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                session_capabilities=session, field_meta={"dsh": {"depthLimit": True}}
            ),
            agent_info=Implementation(name="pool-test-agent", version="0"),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session_id = f"pool-{uuid.uuid4().hex[:12]}"
        self.total += 1
        self.sessions[session_id] = {
            "cwd": cwd,
            "lineage": kwargs.get("dsh"),
            "cancelled": asyncio.Event(),
        }
        return NewSessionResponse(session_id=session_id)

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse | None:
        if not self.closes:
            return await super().close_session(session_id, **kwargs)
        if self.sessions.pop(session_id, None) is None:
            raise RequestError.invalid_params({"details": f"no session {session_id}"})
        self.closed.append(session_id)
        return CloseSessionResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session["cancelled"].set()

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"no session {session_id}"})
        text = " ".join(b.text for b in prompt if isinstance(b, TextContentBlock))
        word = text.split(" ", 1)[0]
        if word == "who":
            facts = {
                "pid": os.getpid(),
                "session": session_id,
                "cwd": session["cwd"],
                "open": len(self.sessions),
                "total": self.total,
                "closed": self.closed,
                "lineage": session["lineage"],
                "env_depth": os.environ.get("DSH_DELEGATION_DEPTH"),
                "init_meta": self.init_meta,
                "instance": INSTANCE,
                "sandbox": os.environ.get("DSH_SANDBOX"),
            }
            await self._say(session_id, json.dumps(facts))
        elif word == "snoop":
            await self._say(session_id, json.dumps(snoop(text.split(" ", 1)[1])))
        elif word == "hang":
            await self._say(session_id, "working on it")
            await session["cancelled"].wait()
            return PromptResponse(stop_reason="cancelled")
        elif word == "crash":
            await self._say(session_id, "about to crash")
            await asyncio.sleep(0.05)
            sys.stderr.write("pool agent: crashing on purpose\n")
            sys.stderr.flush()
            os._exit(3)
        elif word == "fail":
            raise RequestError.internal_error({"details": "the pool agent fails this prompt"})
        else:
            await self._say(session_id, f"echo: {text}")
        return PromptResponse(stop_reason="end_turn")

    async def _say(self, session_id: str, text: str) -> None:
        content = TextContentBlock(type="text", text=text)
        update = AgentMessageChunk(session_update="agent_message_chunk", content=content)
        await self._conn.session_update(session_id, update)


if __name__ == "__main__":
    asyncio.run(serve_stdio(PoolAgent(closes="--no-close" not in sys.argv)))
