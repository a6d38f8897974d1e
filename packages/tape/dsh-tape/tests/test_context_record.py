"""``Context.open(record=DIR)`` (the ``tape`` recorder entry point): the agents' tool
calls go on the tape, ``DSH_TAPE_PROXY`` names it while the context is open, and a
replay of the tape with ``replay_tools`` answers the call without running the tool."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import BaseModel

from dsh.core import Context, ToolResult, parse_preset, tool
from dsh.core.tapes import TAPE_PROXY_VARIABLE, ToolTape, tool_key
from dsh.tape import TapeProxy, read_tape

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{ name = "count", arguments = { n = 2 } }]
[[agent.model.options.replies]]
text = "counted"
"""


class Count(BaseModel):
    n: int


async def test_context_open_record_puts_tool_calls_on_a_tape(tmp_path: Path) -> None:
    runs: list[int] = []

    @tool("count", "count to n")
    async def count(args: Count, tctx: object) -> ToolResult:
        runs.append(args.n)
        return ToolResult(f"counted to {args.n}")

    before = os.environ.get(TAPE_PROXY_VARIABLE)
    async with Context.open(parse_preset(PRESET), record=tmp_path) as ctx:
        assert os.environ[TAPE_PROXY_VARIABLE] != before
        ctx.tools.register(count)
        agent = ctx.agents.create()
        await agent.run("count please")
        prompt, events = agent.prompt.render(), list(agent.session.events)
    assert os.environ.get(TAPE_PROXY_VARIABLE) == before  # restored
    assert runs == [2]
    tape = read_tape(tmp_path)
    assert [(t["name"], t["arguments"], t["call"]) for t in tape.tools] == [("count", {"n": 2}, 0)]
    assert tape.tools[0]["result"]["content"] == [{"type": "text", "text": "counted to 2"}]

    conversation, _ = tool_key(prompt, events)
    assert tape.tools[0]["conversation"] == conversation
    with TapeProxy(tmp_path, "replay", replay_tools=True) as proxy:
        action, answer = await ToolTape(proxy.proxy_url).before(conversation, 0, "count", {"n": 2})
    assert action == "result"
    assert answer is not None
    assert answer.blocks() == [{"type": "text", "text": "counted to 2"}]
