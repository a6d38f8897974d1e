"""A spawn child calls an MCP tool through the real plugin loader, subagent tool and
agent loop; only the models are scripted."""

from __future__ import annotations

import sys

import pytest

from dsh.core import Context, PermissionDecision, PermissionRequest, parse_preset, text_of
from dsh.testing.fixtures import delegating_parent, plugin_rows

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def preset(permission: str) -> str:
    server = {
        "name": "calc",
        "command": sys.executable,
        "args": ["-m", "dsh.testing.mcp_server"],
        "permission": permission,
    }
    child = {
        "model": {
            "adapter": "scripted",
            "options": {
                "replies": [
                    {"tool_calls": [{"name": "calc__add", "arguments": {"a": 19, "b": 23}}]},
                    {"text": "child: the sum is {tool_results}"},
                ]
            },
        }
    }
    return delegating_parent(
        "add 19 and 23", description="sum", then="parent saw: {tool_results}"
    ) + plugin_rows(
        ("dsh-tool-mcp", {"servers": [server]}),
        "dsh-subagent-spawn-in-process",
        ("dsh-tool-subagent", {"provider": "spawn", "agent_options": child}),
    )


async def test_a_spawn_child_calls_an_mcp_tool_and_the_parent_gets_its_answer() -> None:
    async with Context.open(parse_preset(preset("allow"))) as ctx:
        parent = ctx.agents.create()
        outcome = await parent.run("go")
        assert outcome.stop_reason == "completed"
        final = [e for e in parent.session.events if e.type == "assistant/message"][-1]
        assert text_of(final.data["content"]) == "parent saw: child: the sum is 42"


async def test_a_child_asks_whoever_its_parent_asks() -> None:
    asked: list[PermissionRequest] = []

    async def approve(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        return PermissionDecision(True)

    async with Context.open(parse_preset(preset("ask"))) as ctx:
        parent = ctx.agents.create()
        ctx.permissions.set_approver(approve, agent=parent)
        await parent.run("go")
        final = [e for e in parent.session.events if e.type == "assistant/message"][-1]
        assert text_of(final.data["content"]) == "parent saw: child: the sum is 42"
    (request,) = asked
    assert request.tool == "calc__add"
    assert request.agent.parent_id == parent.id
