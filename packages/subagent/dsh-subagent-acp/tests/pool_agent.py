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

from acp import RequestError
from acp.schema import (
    AgentCapabilities,
    CloseSessionResponse,
    PromptResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
)

from dsh.acp import PromptBlock, serve_stdio
from dsh.testing.mock_acp_agent import AcpTestAgent, prompt_text

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


class PoolAgent(AcpTestAgent):
    """See the module docstring."""

    agent_name = "pool-test-agent"

    def __init__(self, closes: bool) -> None:
        super().__init__()
        self.closes = closes
        self.closed: list[str] = []

    def capabilities(self) -> AgentCapabilities:
        session = SessionCapabilities(close=SessionCloseCapabilities()) if self.closes else None
        return AgentCapabilities(
            session_capabilities=session, field_meta={"dsh": {"depthLimit": True}}
        )

    def new_session_id(self) -> str:
        return f"pool-{uuid.uuid4().hex[:12]}"

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse | None:
        if not self.closes:
            return await super().close_session(session_id, **kwargs)
        if self.sessions.pop(session_id, None) is None:
            raise RequestError.invalid_params({"details": f"no session {session_id}"})
        self.closed.append(session_id)
        return CloseSessionResponse()

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"no session {session_id}"})
        text = prompt_text(prompt)
        word = text.split(" ", 1)[0]
        if word == "who":
            facts = {
                "pid": os.getpid(),
                "session": session_id,
                "cwd": session.cwd,
                "open": len(self.sessions),
                "total": self.opened,
                "closed": self.closed,
                "lineage": session.lineage,
                "env_depth": os.environ.get("DSH_DELEGATION_DEPTH"),
                "init_meta": self.init_meta,
                "instance": INSTANCE,
                "sandbox": os.environ.get("DSH_SANDBOX"),
            }
            await self.say(session_id, json.dumps(facts))
        elif word == "snoop":
            await self.say(session_id, json.dumps(snoop(text.split(" ", 1)[1])))
        elif word == "hang":
            await self.say(session_id, "working on it")
            await session.cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        elif word == "crash":
            await self.crash(session_id, "pool agent")
        elif word == "fail":
            raise RequestError.internal_error({"details": "the pool agent fails this prompt"})
        else:
            await self.say(session_id, f"echo: {text}")
        return PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    asyncio.run(serve_stdio(PoolAgent(closes="--no-close" not in sys.argv)))
