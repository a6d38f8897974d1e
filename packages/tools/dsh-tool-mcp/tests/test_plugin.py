"""The dsh-tool-mcp plugin with the test kit's MCP server over stdio: tools, results,
errors, permissions, naming, failed starts, and no process left behind."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dsh.core import (
    AbortSignal,
    Agent,
    Context,
    PermissionDecision,
    PermissionRequest,
    Tool,
    ToolContext,
    ToolResult,
    parse_preset,
)
from dsh.core.plugins import PluginError
from dsh.testing.mcp_server import FAIL_START_MESSAGE
from dsh.testing.processes import alive, wait_until_gone

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PY = sys.executable
# The server reports its own pids (pid(), spawn_sleeper()); inside the sandbox's PID
# namespace those are not this process's pids, so these teardown tests run unsandboxed
# (mode "off"); test_sandbox.py runs servers in the sandbox.
BASE = '[agent.model]\nadapter = "scripted"\n[sandbox]\nmode = "off"\n'


def server(name: str = "calc", *extra: str, **fields: Any) -> dict[str, Any]:
    """A stdio server row running the test kit's MCP server."""
    return {
        "name": name,
        "command": PY,
        "args": ["-m", "dsh.testing.mcp_server", *extra],
        **fields,
    }


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(parse_preset(BASE)) as ctx:
        yield ctx


async def call(agent: Agent, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
    tool = agent.tools.get(name)
    assert tool is not None, f"{name} not visible to {agent}; it has {agent.tools.names()}"
    return await tool.invoke(arguments or {}, ToolContext(agent, "call-1", AbortSignal()))


def text(result: ToolResult) -> str:
    assert isinstance(result.content, str)
    return result.content


async def test_tools_are_registered_with_server_names_schemas_and_policy(ctx: Context) -> None:
    await ctx.plugins.load("dsh-tool-mcp", {"servers": [server("calc", "--alias", "files.read")]})
    names = ctx.tools.names()
    assert {"calc__add", "calc__echo", "calc__fail", "calc__sleep", "calc__files_read"} <= set(
        names
    )
    add = ctx.tools.get("calc__add")
    assert isinstance(add, Tool)
    assert add.description == "Add two numbers."
    assert add.spec.parameters["type"] == "object"
    assert set(add.spec.parameters["properties"]) == {"a", "b"}
    assert add.spec.parameters["required"] == ["a", "b"]
    assert add.permission == "ask"
    assert add.kind == "other"
    assert add.title_for({"a": 1, "b": 2}) == 'calc: add {"a": 1, "b": 2}'


async def test_results_errors_and_placeholders(ctx: Context) -> None:
    ctx.permissions.allow_all = True
    await ctx.plugins.load("dsh-tool-mcp", {"servers": [server("calc", permission="allow")]})
    agent = ctx.agents.create()

    added = await call(agent, "calc__add", {"a": 2, "b": 40})
    assert (text(added), added.is_error) == ("42", False)
    assert added.data == {"mcp_server": "calc", "mcp_tool": "add"}

    failed = await call(agent, "calc__fail", {"message": "the disk is full"})
    assert (text(failed), failed.is_error) == ("the disk is full", True)

    picture = await call(agent, "calc__picture")
    assert not picture.is_error
    assert text(picture) == "a tiny picture:\n[image: image/png, 68 bytes, not shown]"

    wrong = await call(agent, "calc__add", {"a": "many"})
    assert wrong.is_error
    assert "validation error" in text(wrong)


async def test_default_permission_is_ask_refused_unattended_and_asked_when_someone_answers(
    ctx: Context,
) -> None:
    await ctx.plugins.load("dsh-tool-mcp", {"servers": [server("calc")]})
    agent = ctx.agents.create()
    refused = await call(agent, "calc__echo", {"text": "hi"})
    assert refused.is_error
    assert 'tool "calc__echo" needs approval' in text(refused)

    asked: list[PermissionRequest] = []

    async def approve(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        return PermissionDecision(True)

    ctx.permissions.set_approver(approve)
    allowed = await call(agent, "calc__echo", {"text": "hi"})
    assert (text(allowed), allowed.is_error) == ("hi", False)
    (request,) = asked
    assert (request.tool, request.kind) == ("calc__echo", "other")
    assert request.title == 'calc: echo {"text": "hi"}'


async def test_permission_per_server_and_preset_override(ctx: Context) -> None:
    await ctx.plugins.load(
        "dsh-tool-mcp",
        {"servers": [server("open", permission="allow"), server("shut", permission="deny")]},
    )
    agent = ctx.agents.create()
    assert text(await call(agent, "open__echo", {"text": "ok"})) == "ok"
    denied = await call(agent, "shut__echo", {"text": "no"})
    assert denied.is_error
    assert "denied by the permission policy" in text(denied)


async def test_a_server_that_cannot_start_fails_the_load_naming_it(ctx: Context) -> None:
    with pytest.raises(PluginError) as missing:
        await ctx.plugins.load(
            "dsh-tool-mcp", {"servers": [{"name": "ghost", "command": "dsh-no-such-mcp-server"}]}
        )
    assert (
        "could not start MCP server \"ghost\" 'dsh-no-such-mcp-server': No such file or directory"
        in str(missing.value)
    )

    with pytest.raises(PluginError) as exited:
        await ctx.plugins.load("dsh-tool-mcp", {"servers": [server("broken", "--fail-start")]})
    message = str(exited.value)
    assert 'plugin row (id "dsh-tool-mcp"' in message
    assert 'MCP server "broken" exited before it was ready (exit status 3)' in message
    assert FAIL_START_MESSAGE in message

    with pytest.raises(PluginError) as hung:
        await ctx.plugins.load(
            "dsh-tool-mcp", {"servers": [server("stuck", "--hang-start", start_timeout=1)]}
        )
    assert 'MCP server "stuck" did not start within 1 s' in str(hung.value)
    assert ctx.plugins.loaded() == []
    assert ctx.tools.names() == []


async def test_one_failing_server_stops_the_others_of_its_row(ctx: Context) -> None:
    with pytest.raises(PluginError) as failed:
        await ctx.plugins.load(
            "dsh-tool-mcp", {"servers": [server("good"), server("bad", "--fail-start")]}
        )
    assert 'MCP server "bad"' in str(failed.value)
    assert ctx.tools.names() == []  # and "good" is stopped: the leak check would fail


async def test_an_unknown_tool_in_the_allow_list_fails_the_start(ctx: Context) -> None:
    with pytest.raises(PluginError) as failed:
        await ctx.plugins.load("dsh-tool-mcp", {"servers": [server(tools=["add", "multiply"])]})
    assert 'MCP server "calc" offers no tool named multiply' in str(failed.value)
    await ctx.plugins.load("dsh-tool-mcp", {"servers": [server(tools=["echo", "add"])]})
    assert ctx.tools.names() == ["calc__echo", "calc__add"]


async def test_name_collisions_fail_the_load_naming_both(ctx: Context) -> None:
    with pytest.raises(PluginError) as within:
        await ctx.plugins.load(
            "dsh-tool-mcp", {"servers": [server("s", "--alias", "x.y", "--alias", "x_y")]}
        )
    assert (
        'MCP tools "x.y" of server "s" and "x_y" of server "s" would both be named "s__x_y"'
        in str(within.value)
    )

    with pytest.raises(PluginError) as across:
        await ctx.plugins.load(
            "dsh-tool-mcp",
            {"servers": [server("a", "--alias", "b__c"), server("a__b", "--alias", "c")]},
        )
    assert (
        'MCP tools "b__c" of server "a" and "c" of server "a__b" would both be named "a__b__c"'
        in str(across.value)
    )

    async def taken(arguments: Any, tctx: ToolContext) -> str:
        return "mine"

    ctx.tools.register(Tool("calc__echo", "already here", {"type": "object"}, taken))
    with pytest.raises(PluginError) as existing:
        await ctx.plugins.load("dsh-tool-mcp", {"servers": [server("calc")]})
    assert "MCP tool 'calc__echo' cannot be registered" in str(existing.value)
    assert 'a tool named "calc__echo" is already registered' in str(existing.value)
    assert ctx.tools.names() == ["calc__echo"]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"name": "x"}, "set command (a stdio server) or url (an HTTP server)"),
        ({"name": "x", "command": "a", "url": "http://h/mcp"}, "not both"),
        ({"name": "x", "command": "a", "headers_env": {"A": "B"}}, "only for HTTP servers"),
        ({"name": "x", "url": "http://h/mcp", "passthrough_env": ["K"]}, "only for stdio"),
        ({"name": "x", "url": "ftp://h"}, "url must start with http:// or https://"),
        ({"name": "my server", "command": "a"}, "invalid MCP server name 'my server'"),
        ({"name": "x", "command": "a", "permission": "maybe"}, "permission"),
        ({"name": "x", "url": "http://h/mcp", "headers_env": {"A": "not a name"}}, "headers_env"),
    ],
)
async def test_bad_server_entries_fail_validation(
    ctx: Context, entry: dict[str, Any], problem: str
) -> None:
    with pytest.raises(PluginError) as failed:
        await ctx.plugins.load("dsh-tool-mcp", {"servers": [entry]})
    assert "invalid config" in str(failed.value)
    assert problem in str(failed.value)


async def test_duplicate_server_names_fail_validation(ctx: Context) -> None:
    with pytest.raises(PluginError, match='two MCP servers are named "calc"'):
        await ctx.plugins.load("dsh-tool-mcp", {"servers": [server(), server()]})


async def test_servers_get_a_scrubbed_environment_with_passthrough_and_a_run_tag(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_MCP_TEST_SECRET", "hunter2")
    monkeypatch.setenv("DSH_MCP_TEST_KEY", "key-123")
    await ctx.plugins.load(
        "dsh-tool-mcp",
        {
            "servers": [
                server(
                    permission="allow",
                    passthrough_env=["DSH_MCP_TEST_KEY"],
                    env={"DSH_MCP_TEST_PLAIN": "plain"},
                )
            ]
        },
    )
    agent = ctx.agents.create()

    async def env(name: str) -> str:
        return text(await call(agent, "calc__env", {"name": name}))

    assert await env("DSH_MCP_TEST_SECRET") == "<unset>"
    assert await env("DSH_MCP_TEST_KEY") == "key-123"
    assert await env("DSH_MCP_TEST_PLAIN") == "plain"
    assert await env("DSH_PROCESS_TAG") != "<unset>"


async def test_cwd_is_relative_to_the_context(tmp_path: Any) -> None:
    (tmp_path / "sub").mkdir()
    async with Context.open(parse_preset(BASE), cwd=tmp_path) as ctx:
        await ctx.plugins.load("dsh-tool-mcp", {"servers": [server(permission="allow", cwd="sub")]})
        agent = ctx.agents.create()
        assert text(await call(agent, "calc__env", {"name": "PWD"})) in (
            "<unset>",
            str(tmp_path / "sub"),
        )
        connection = _connection(ctx, "calc")
        assert connection.pid is not None
        assert os.readlink(f"/proc/{connection.pid}/cwd") == str(tmp_path / "sub")


def _connection(ctx: Context, name: str) -> Any:
    from dsh.tool_mcp import McpServers

    for loaded in ctx.plugins.loaded():
        for disposer in loaded.effects._disposers:
            owner = getattr(disposer, "__self__", None)
            if isinstance(owner, McpServers) and owner.get(name) is not None:
                return owner.get(name)
    raise AssertionError(f"no MCP server {name!r} loaded")


async def test_server_and_its_grandchildren_are_gone_after_the_context_closes() -> None:
    async with Context.open(parse_preset(BASE)) as ctx:
        await ctx.plugins.load("dsh-tool-mcp", {"servers": [server(permission="allow")]})
        agent = ctx.agents.create()
        server_pid = int(text(await call(agent, "calc__pid")))
        in_group = int(text(await call(agent, "calc__spawn_sleeper", {"detach": False})))
        detached = int(text(await call(agent, "calc__spawn_sleeper", {"detach": True})))
        assert all(alive(pid) for pid in (server_pid, in_group, detached))
    await anyio.to_thread.run_sync(wait_until_gone, [server_pid, in_group, detached], 5.0)


async def test_unloading_the_row_stops_the_server_and_removes_its_tools(ctx: Context) -> None:
    loaded = await ctx.plugins.load("dsh-tool-mcp", {"servers": [server(permission="allow")]})
    agent = ctx.agents.create()
    server_pid = int(text(await call(agent, "calc__pid")))
    await ctx.plugins.unload(loaded.id)
    assert ctx.tools.names() == []
    await anyio.to_thread.run_sync(wait_until_gone, [server_pid], 5.0)


async def test_a_slow_call_times_out_and_a_cancelled_call_leaves_the_server_usable(
    ctx: Context,
) -> None:
    await ctx.plugins.load(
        "dsh-tool-mcp", {"servers": [server(permission="allow", tool_timeout=0.5)]}
    )
    agent = ctx.agents.create()
    with anyio.fail_after(5):
        slow = await call(agent, "calc__sleep", {"seconds": 30})
    assert slow.is_error
    assert text(slow).startswith(
        'MCP tool "sleep" of server "calc" did not answer within 0.5 s (tool_timeout)'
    )

    with anyio.move_on_after(0.3) as scope:
        await call(agent, "calc__sleep", {"seconds": 0.4})
    assert scope.cancelled_caught
    assert text(await call(agent, "calc__echo", {"text": "still here"})) == "still here"


async def test_a_server_that_dies_gives_error_results(ctx: Context) -> None:
    await ctx.plugins.load("dsh-tool-mcp", {"servers": [server(permission="allow")]})
    agent = ctx.agents.create()
    server_pid = int(text(await call(agent, "calc__pid")))
    os.kill(server_pid, signal.SIGKILL)
    await anyio.to_thread.run_sync(wait_until_gone, [server_pid], 5.0)
    with anyio.fail_after(5):
        result = await call(agent, "calc__echo", {"text": "anyone?"})
    assert result.is_error
    assert text(result) == 'MCP server "calc" is no longer running (killed by SIGKILL)'
    again = await call(agent, "calc__echo", {"text": "anyone?"})
    assert text(again) == text(result)


PRESET = f"""
[agent.model]
adapter = "scripted"

[[plugin]]
name = "dsh-testing-example"

[[plugin]]
name = "dsh-tool-mcp"

[[plugin.config.servers]]
name = "calc"
command = {PY!r}
args = ["-m", "dsh.testing.mcp_server"]
permission = "allow"
tools = ["add"]

[[plugin.config.servers]]
name = "{{second}}"
command = {PY!r}
args = ["-m", "dsh.testing.mcp_server", {{extra}}]

[permissions.tools]
calc__add = "deny"
"""


async def test_servers_from_a_preset_and_the_permissions_table_overriding_them() -> None:
    preset = parse_preset(PRESET.format(second="more", extra='"--alias", "x"'))
    async with Context.open(preset) as ctx:
        assert "calc__add" in ctx.tools
        assert "more__x" in ctx.tools
        agent = ctx.agents.create()
        denied = await call(agent, "calc__add", {"a": 1, "b": 1})
        assert denied.is_error
        assert "[permissions.tools] calc__add" in text(denied)


async def test_a_failing_server_in_a_preset_names_the_row_and_the_server() -> None:
    preset = parse_preset(PRESET.format(second="broken", extra='"--fail-start"'))
    with pytest.raises(PluginError) as failed:
        async with Context.open(preset):
            pass
    assert str(failed.value).startswith(
        'preset row 2 (id "dsh-tool-mcp", plugin "dsh-tool-mcp"): MCP server "broken" exited'
    )
