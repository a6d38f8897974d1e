"""A spawn child calls an MCP tool through the real plugin loader, subagent tool and
agent loop; only the models are scripted."""

from __future__ import annotations

import json
import sys

import pytest

from dsh.core import Context, PermissionDecision, PermissionRequest, parse_preset, text_of

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
    return f"""
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
[[agent.model.options.replies.tool_calls]]
name = "subagent"
arguments = {{ description = "sum", prompt = "add 19 and 23" }}
[[agent.model.options.replies]]
text = "parent saw: {{tool_results}}"

[[plugin]]
name = "dsh-tool-mcp"
config = {{ servers = [{_toml(server)}] }}

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = {{ provider = "spawn", agent_options = {_toml(child)} }}
"""


def _toml(value: object) -> str:
    """An inline TOML value (JSON's syntax is TOML's for these shapes, but keys)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


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
