"""attach_servers: MCP servers for one agent only (what `dsh acp` does with the servers
an editor sends in session/new), and the ACP entry converter."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Agent, Context, ToolContext, ToolResult, parse_preset
from dsh.testing.processes import alive, wait_until_gone
from dsh.tool_mcp import McpConfigError, McpError, McpServerConfig, attach_servers, servers_from_acp

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PY = sys.executable
# The server reports its own pids (pid(), spawn_sleeper()); inside the sandbox's PID
# namespace those are not this process's pids, so these teardown tests run unsandboxed
# (mode "off"); test_sandbox.py runs servers in the sandbox.
BASE = '[agent.model]\nadapter = "scripted"\n[sandbox]\nmode = "off"\n'


def acp_stdio(name: str = "calc", *extra: str) -> dict[str, Any]:
    """A stdio entry as an ACP client sends it in session/new."""
    return {
        "name": name,
        "command": PY,
        "args": ["-m", "dsh.testing.mcp_server", *extra],
        "env": [{"name": "DSH_MCP_FROM_CLIENT", "value": "yes"}],
    }


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(parse_preset(BASE)) as ctx:
        ctx.permissions.allow_all = True
        yield ctx


async def call(agent: Agent, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
    tool = agent.tools.get(name)
    assert tool is not None, f"{name} not visible to {agent}; it has {agent.tools.names()}"
    return await tool.invoke(arguments or {}, ToolContext(agent, "call-1", AbortSignal()))


def text(result: ToolResult) -> str:
    assert isinstance(result.content, str)
    return result.content


async def test_servers_attach_to_one_agent_and_the_disposer_stops_them(ctx: Context) -> None:
    mine = ctx.agents.create(label="mine")
    other = ctx.agents.create(label="other")
    attached = await attach_servers(mine, servers_from_acp([acp_stdio("My Calc!")]))
    assert attached.server_names == ["My_Calc"]
    assert "My_Calc__add" in attached.tool_names
    assert "My_Calc__add" in mine.tools.names()
    assert [spec.name for spec in mine.tools.specs()][: len(attached.tool_names)] == (
        attached.tool_names
    )
    assert other.tools.get("My_Calc__add") is None
    assert "My_Calc__add" not in ctx.tools

    assert text(await call(mine, "My_Calc__add", {"a": 1, "b": 2})) == "3"
    assert text(await call(mine, "My_Calc__env", {"name": "DSH_MCP_FROM_CLIENT"})) == "yes"
    server_pid = int(text(await call(mine, "My_Calc__pid")))
    helper = int(text(await call(mine, "My_Calc__spawn_sleeper", {"detach": True})))

    await attached()
    assert mine.tools.get("My_Calc__add") is None
    await anyio.to_thread.run_sync(wait_until_gone, [server_pid, helper], 5.0)
    await attached.aclose()  # idempotent


async def test_closing_the_agent_stops_its_servers(ctx: Context) -> None:
    agent = ctx.agents.create()
    await attach_servers(
        agent, [McpServerConfig(name="calc", command=PY, args=["-m", "dsh.testing.mcp_server"])]
    )
    server_pid = int(text(await call(agent, "calc__pid")))
    assert alive(server_pid)
    await agent.aclose()
    await anyio.to_thread.run_sync(wait_until_gone, [server_pid], 5.0)


async def test_the_context_closing_stops_attached_servers() -> None:
    async with Context.open(parse_preset(BASE)) as ctx:
        ctx.permissions.allow_all = True
        agent = ctx.agents.create()
        await attach_servers(agent, servers_from_acp([acp_stdio()]))
        server_pid = int(text(await call(agent, "calc__pid")))
    await anyio.to_thread.run_sync(wait_until_gone, [server_pid], 5.0)


async def test_a_failing_server_attaches_nothing_and_names_the_server(ctx: Context) -> None:
    agent = ctx.agents.create()
    entries = servers_from_acp([acp_stdio("good"), acp_stdio("bad", "--fail-start")])
    with pytest.raises(McpError) as failed:
        await attach_servers(agent, entries)
    assert 'MCP server "bad" exited before it was ready (exit status 3)' in str(failed.value)
    assert failed.value.server == "bad"
    assert agent.tools.names() == []


async def test_a_tool_the_agent_already_has_fails_the_attach(ctx: Context) -> None:
    await ctx.plugins.load(
        "dsh-tool-mcp",
        {"servers": [{"name": "calc", "command": PY, "args": ["-m", "dsh.testing.mcp_server"]}]},
    )
    agent = ctx.agents.create()
    with pytest.raises(McpConfigError) as clash:
        await attach_servers(agent, servers_from_acp([acp_stdio("calc")]))
    assert "MCP tool 'calc__add' cannot be given to this agent" in str(clash.value)
    assert agent.tools.get("calc__add") is ctx.tools.get("calc__add")


async def test_a_cancelled_attach_leaves_nothing(ctx: Context) -> None:
    agent = ctx.agents.create()
    with anyio.move_on_after(0.2):
        await attach_servers(agent, servers_from_acp([acp_stdio()]))
    assert agent.tools.names() == []  # and the leak check sees no server


async def test_raw_mappings_are_validated_naming_the_server(ctx: Context) -> None:
    agent = ctx.agents.create()
    with pytest.raises(McpConfigError, match=r'MCP server "x": .*set command'):
        await attach_servers(agent, [{"name": "x"}])
    with pytest.raises(McpConfigError, match='two MCP servers are named "x"'):
        await attach_servers(agent, [{"name": "x", "command": "a"}, {"name": "x", "command": "b"}])


def test_acp_entries_convert_to_server_configs() -> None:
    stdio, http, sse = servers_from_acp(
        [
            {
                "name": "files",
                "command": "npx",
                "args": ["-y", "server"],
                "env": [{"name": "ROOT", "value": "/w"}],
            },
            {
                "type": "http",
                "name": "web api",
                "url": "https://example.com/mcp",
                "headers": [{"name": "Authorization", "value": "Bearer t"}],
            },
            {"type": "sse", "name": "old", "url": "http://127.0.0.1:9/sse", "headers": []},
        ],
        permission="allow",
        start_timeout=7,
    )
    assert (stdio.name, stdio.kind, stdio.command, stdio.args) == (
        "files",
        "stdio",
        "npx",
        ["-y", "server"],
    )
    assert stdio.env == {"ROOT": "/w"}
    assert (http.name, http.kind, http.url) == ("web_api", "http", "https://example.com/mcp")
    assert http.headers == {"Authorization": "Bearer t"}
    assert (sse.kind, sse.headers) == ("sse", {})
    assert {c.permission for c in (stdio, http, sse)} == {"allow"}
    assert {c.start_timeout for c in (stdio, http, sse)} == {7}


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ([{"type": "ws", "name": "a", "url": "ws://x"}], "unsupported type 'ws'"),
        ([{"command": "x"}], "#1: no name"),
        ([{"name": "a"}], "MCP server #1 ('a'): (root): Value error, a stdio server needs"),
        ([{"name": "a", "command": "x", "env": ["A=1"]}], "env must be a list of {name, value}"),
        (
            [{"name": "a b", "command": "x"}, {"name": "a.b", "command": "y"}],
            "MCP servers #1 ('a b') and #2 ('a.b') would both be named \"a_b\"",
        ),
    ],
)
def test_bad_acp_entries_raise_naming_them(entries: list[dict[str, Any]], problem: str) -> None:
    with pytest.raises(McpConfigError) as failed:
        servers_from_acp(entries)
    assert problem in str(failed.value)
