""":class:`AcpAgentBase` refuses every ``acp.Agent`` method a subclass does not implement,
in whichever ``agent-client-protocol`` is installed: 0.12 here, 1.0 under
``tools/check_acp_1.sh`` (whose ``acp.Agent`` has methods 0.12 lacks: ``session/delete``,
``logout``, ``nes/*``, ``document/*``...). An inherited Protocol stub would answer ``null``,
which a client takes for success."""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
from typing import Any

import acp
import pytest

from dsh.acp import AcpAgentBase, serve
from dsh.testing.mock_acp_agent import AcpTestAgent

pytestmark = pytest.mark.timeout(60)


class MinimalAgent(AcpTestAgent):
    """Only what a subclass must implement (``open_session``, ``session/prompt`` and
    ``session/cancel``: what :class:`AcpTestAgent` writes)."""


def _protocol_stubs(cls: type) -> list[str]:
    """The ``acp.Agent`` methods ``cls`` still inherits as Protocol stubs."""
    return [
        name
        for name, stub in vars(acp.Agent).items()
        if not name.startswith("_")
        and inspect.iscoroutinefunction(stub)
        and getattr(cls, name, None) is stub
    ]


def test_no_acp_agent_stub_is_inherited() -> None:
    required = ["prompt", "cancel"]  # a subclass's (initialize, session/new: the base's)
    assert sorted(_protocol_stubs(AcpAgentBase)) == sorted(required)
    assert _protocol_stubs(MinimalAgent) == []


async def _exchange(frames: list[dict[str, Any]], answers: int) -> list[dict[str, Any]]:
    """Serve a :class:`MinimalAgent` on a socket pair; send ``frames``, read ``answers``
    messages (each within 10 s), then end the input."""
    ours, theirs = socket.socketpair()
    server_reader, server_writer = await asyncio.open_connection(sock=theirs)
    task = asyncio.create_task(serve(MinimalAgent(), server_reader, server_writer))
    reader, writer = await asyncio.open_connection(sock=ours)
    try:
        for frame in frames:
            writer.write(json.dumps(frame).encode() + b"\n")
        await writer.drain()
        received = []
        for _ in range(answers):
            received.append(json.loads(await asyncio.wait_for(reader.readline(), 10)))
        writer.write_eof()
        await asyncio.wait_for(task, 10)
        return received
    finally:
        writer.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


REFUSED = {
    "session/delete": {"sessionId": "s-1"},  # stable in ACP 1.0, absent from acp 0.12
    "logout": {},
    "session/list": {},
    "session/set_mode": {"sessionId": "s-1", "modeId": "fast"},
    "authenticate": {"methodId": "none"},
}


def test_methods_a_subclass_lacks_answer_method_not_found() -> None:
    frames: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    ]
    for index, (method, params) in enumerate(REFUSED.items(), start=1):
        frames.append({"jsonrpc": "2.0", "id": index, "method": method, "params": params})
    # a notification no one implements is ignored; the connection goes on
    frames.append(
        {
            "jsonrpc": "2.0",
            "method": "document/didOpen",
            "params": {
                "sessionId": "s-1",
                "uri": "file:///a.py",
                "languageId": "python",
                "version": 1,
                "text": "",
            },
        }
    )
    last = len(REFUSED) + 1
    frames.append(
        {
            "jsonrpc": "2.0",
            "id": last,
            "method": "session/new",
            "params": {"cwd": "/", "mcpServers": []},
        }
    )
    answers = {m["id"]: m for m in asyncio.run(_exchange(frames, last + 1))}
    assert "result" in answers[0], answers[0]
    for index, method in enumerate(REFUSED, start=1):
        assert answers[index].get("error", {}).get("code") == -32601, (method, answers[index])
    assert answers[last].get("result") == {"sessionId": "s-1"}, answers[last]
