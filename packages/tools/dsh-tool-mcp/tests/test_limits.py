"""Limits of a stdio MCP server, with a real server process written here: a message
over ``max_message_bytes`` fails every pending call at once and stops the server; a
call over ``tool_timeout`` fails, and the server is told to cancel it."""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Agent, Context, ToolContext, ToolResult, parse_preset
from dsh.core.plugins import PluginError
from dsh.testing.processes import alive, wait_until_gone
from dsh.tool_mcp import McpServerConfig, McpServers

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

# The server reports its own pids (pid(), spawn_sleeper()); inside the sandbox's PID
# namespace those are not this process's pids, so these teardown tests run unsandboxed
# (mode "off"); test_sandbox.py runs servers in the sandbox.
BASE = '[agent.model]\nadapter = "scripted"\n[sandbox]\nmode = "off"\n'

SERVER = textwrap.dedent(
    '''
    """An MCP server with a tool that answers with a long text and one that never
    answers (it notes its cancellation in its working directory)."""
    import sys
    from pathlib import Path

    import anyio
    from mcp.server.mcpserver import MCPServer

    marks = Path.cwd()
    if "--noisy-start" in sys.argv:
        sys.stdout.write("x" * 300_000 + "\\n")
        sys.stdout.flush()
    server = MCPServer("limits", log_level="WARNING")


    @server.tool(description="A text of the given number of characters.")
    def big(size: int) -> str:
        return "x" * size


    @server.tool(description="Never answers.")
    async def hang(tag: str) -> str:
        try:
            await anyio.sleep_forever()
        finally:
            (marks / f"cancelled-{tag}").write_text("cancelled")
        return "unreachable"


    @server.tool(description="Say the text back.")
    def echo(text: str) -> str:
        return text

    server.run("stdio")
    '''
)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "limits_server.py"
    path.write_text(SERVER)
    return path


def server(script: Path, *extra: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": "lim",
        "command": sys.executable,
        "args": [str(script), *extra],
        "permission": "allow",
        **fields,
    }


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[Context]:
    async with Context.open(parse_preset(BASE), cwd=tmp_path) as ctx:
        yield ctx


async def call(agent: Agent, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
    tool = agent.tools.get(name)
    assert tool is not None, f"{name} not visible; tools: {agent.tools.names()}"
    return await tool.invoke(arguments or {}, ToolContext(agent, "call-1", AbortSignal()))


def server_pid(ctx: Context) -> int:
    """The server process's id, as this process sees it (the tool ``pid`` answers from
    inside the server's sandbox, which may have a process namespace of its own)."""
    for loaded in ctx.plugins.loaded():
        for disposer in loaded.effects._disposers:
            owner = getattr(disposer, "__self__", None)
            if isinstance(owner, McpServers):
                connection = owner.get("lim")
                if connection is not None and connection.pid is not None:
                    return connection.pid
    raise AssertionError("no MCP server lim running")


def text(result: ToolResult) -> str:
    assert isinstance(result.content, str)
    return result.content


async def wait_for_file(path: Path, bound: float) -> bool:
    with anyio.move_on_after(bound):
        while not path.exists():
            await anyio.sleep(0.05)
    return path.exists()


OVER_LIMIT = (
    'MCP server "lim" sent a message longer than its limit of 100000 bytes'
    " (max_message_bytes): the connection was closed, the server stopped and its pending"
    " calls failed; raise max_message_bytes in the server's config if it really sends"
    " messages that large"
)


async def test_a_message_over_the_limit_fails_every_pending_call_at_once(
    ctx: Context, script: Path
) -> None:
    await ctx.plugins.load("dsh-tool-mcp", {"servers": [server(script, max_message_bytes=100_000)]})
    agent = ctx.agents.create()
    pid = server_pid(ctx)
    # a text of 20000 characters is sent twice (text and structured content): within the limit
    assert text(await call(agent, "lim__big", {"size": 20_000})) == "x" * 20_000

    results: dict[str, ToolResult] = {}

    async def pending() -> None:
        results["hang"] = await call(agent, "lim__hang", {"tag": "pending"})

    started = time.monotonic()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pending)
            await anyio.sleep(0.2)  # the hanging call is in flight
            results["big"] = await call(agent, "lim__big", {"size": 500_000})
    took = time.monotonic() - started
    assert (results["big"].is_error, text(results["big"])) == (True, OVER_LIMIT)
    assert (results["hang"].is_error, text(results["hang"])) == (True, OVER_LIMIT)
    assert took < 5, f"the calls took {took:.1f} s to fail"

    # the server is stopped (no grace: it was blocked writing), and says why afterwards
    await anyio.to_thread.run_sync(wait_until_gone, [pid], 10.0)
    later = await call(agent, "lim__echo", {"text": "anyone?"})
    assert (later.is_error, text(later)) == (True, OVER_LIMIT)


async def test_a_message_over_the_limit_at_start_fails_the_load(ctx: Context, script: Path) -> None:
    with pytest.raises(PluginError) as failed:
        await ctx.plugins.load(
            "dsh-tool-mcp",
            {"servers": [server(script, "--noisy-start", max_message_bytes=100_000)]},
        )
    assert OVER_LIMIT in str(failed.value)
    assert ctx.tools.names() == []


async def test_a_call_over_tool_timeout_fails_and_is_cancelled_on_the_server(
    ctx: Context, script: Path
) -> None:
    await ctx.plugins.load("dsh-tool-mcp", {"servers": [server(script, tool_timeout=1)]})
    agent = ctx.agents.create()
    pid = server_pid(ctx)
    started = time.monotonic()
    with anyio.fail_after(15):
        result = await call(agent, "lim__hang", {"tag": "slow"})
    took = time.monotonic() - started
    assert result.is_error
    assert text(result) == (
        'MCP tool "hang" of server "lim" did not answer within 1 s (tool_timeout); the call'
        " was cancelled. Raise tool_timeout in the server's config for slower tools"
    )
    assert 0.9 <= took < 10, took
    # the server got notifications/cancelled and stopped the handler; it is still usable
    assert await wait_for_file(script.parent / "cancelled-slow", 10.0)
    assert text(await call(agent, "lim__echo", {"text": "still here"})) == "still here"
    assert alive(pid)


def test_every_call_has_a_default_timeout() -> None:
    config = McpServerConfig(name="x", command="x")
    assert config.tool_timeout == 120.0
    assert McpServerConfig(name="x", url="http://h/mcp").tool_timeout == 120.0
    assert config.max_message_bytes == 64 * 1024 * 1024


def test_max_message_bytes_is_for_stdio_servers_only() -> None:
    with pytest.raises(ValueError, match="max_message_bytes: only for stdio servers"):
        McpServerConfig(name="x", url="http://h/mcp", max_message_bytes=4096)
