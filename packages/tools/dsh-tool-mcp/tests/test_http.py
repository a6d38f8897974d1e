"""Streamable HTTP: the test kit's MCP server served on 127.0.0.1, used through a URL,
with a header whose value comes from the environment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh.core import AbortSignal, Agent, Context, ToolContext, ToolResult, parse_preset
from dsh.core.plugins import PluginError
from dsh.testing.mcp_server import serve_http
from dsh.tool_mcp import attach_servers, servers_from_acp

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

BASE = '[agent.model]\nadapter = "scripted"\n'


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with serve_http() as served:
        yield served


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(parse_preset(BASE)) as ctx:
        ctx.permissions.allow_all = True
        yield ctx


async def call(agent: Agent, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
    tool = agent.tools.get(name)
    assert tool is not None, f"{name} not visible; tools: {agent.tools.names()}"
    return await tool.invoke(arguments or {}, ToolContext(agent, "call-1", AbortSignal()))


def text(result: ToolResult) -> str:
    assert isinstance(result.content, str)
    return result.content


async def test_tools_over_streamable_http_with_a_secret_header_from_the_environment(
    url: str, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_MCP_TEST_TOKEN", "s3cret")
    await ctx.plugins.load(
        "dsh-tool-mcp",
        {
            "servers": [
                {
                    "name": "web",
                    "url": url,
                    "headers": {"X-Client": "dsh-test"},
                    "headers_env": {
                        "Authorization": "Bearer ${DSH_MCP_TEST_TOKEN}",
                        "X-Raw-Token": "DSH_MCP_TEST_TOKEN",
                    },
                }
            ]
        },
    )
    agent = ctx.agents.create()
    assert text(await call(agent, "web__add", {"a": 20, "b": 22})) == "42"
    assert text(await call(agent, "web__header", {"name": "Authorization"})) == "Bearer s3cret"
    assert text(await call(agent, "web__header", {"name": "X-Raw-Token"})) == "s3cret"
    assert text(await call(agent, "web__header", {"name": "X-Client"})) == "dsh-test"
    failed = await call(agent, "web__fail", {"message": "nope"})
    assert (text(failed), failed.is_error) == ("nope", True)


async def test_a_missing_secret_fails_the_load_naming_server_header_and_variable(
    url: str, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DSH_MCP_TEST_TOKEN", raising=False)
    with pytest.raises(PluginError) as failed:
        await ctx.plugins.load(
            "dsh-tool-mcp",
            {
                "servers": [
                    {
                        "name": "web",
                        "url": url,
                        "headers_env": {"Authorization": "DSH_MCP_TEST_TOKEN"},
                    }
                ]
            },
        )
    assert (
        "MCP server \"web\": header 'Authorization' comes from environment variable"
        " DSH_MCP_TEST_TOKEN, which is not set" in str(failed.value)
    )


async def test_an_unreachable_url_fails_the_load_naming_the_server(ctx: Context) -> None:
    with pytest.raises(PluginError) as failed:
        await ctx.plugins.load(
            "dsh-tool-mcp",
            {"servers": [{"name": "gone", "url": "http://127.0.0.1:9/mcp", "start_timeout": 5}]},
        )
    assert 'MCP server "gone" at http://127.0.0.1:9/mcp could not be initialized' in str(
        failed.value
    )


async def test_credentials_in_a_server_url_stay_out_of_the_error(ctx: Context) -> None:
    secret_url = "http://user:s3cret@127.0.0.1:9/mcp?token=s3cret"
    server = {"name": "gone", "url": secret_url, "start_timeout": 5}
    with pytest.raises(PluginError) as failed:
        await ctx.plugins.load("dsh-tool-mcp", {"servers": [server]})
    message = str(failed.value)
    assert "s3cret" not in message
    assert 'MCP server "gone" at http://***@127.0.0.1:9/mcp?token=*** could not be' in message


async def test_an_acp_http_entry_attaches_to_one_agent(url: str, ctx: Context) -> None:
    agent = ctx.agents.create()
    entries = servers_from_acp(
        [
            {
                "type": "http",
                "name": "web",
                "url": url,
                "headers": [{"name": "X-Editor", "value": "zed"}],
            }
        ]
    )
    attached = await attach_servers(agent, entries)
    assert text(await call(agent, "web__header", {"name": "x-editor"})) == "zed"
    assert ctx.agents.create().tools.get("web__header") is None
    await attached()
    assert agent.tools.get("web__header") is None


async def test_the_older_sse_transport(ctx: Context) -> None:
    async with serve_http(sse=True) as sse_url:
        await ctx.plugins.load(
            "dsh-tool-mcp",
            {
                "servers": [
                    {"name": "old", "transport": "sse", "url": sse_url, "headers": {"X-A": "b"}}
                ]
            },
        )
        agent = ctx.agents.create()
        assert text(await call(agent, "old__echo", {"text": "over sse"})) == "over sse"
        assert text(await call(agent, "old__header", {"name": "x-a"})) == "b"
        await ctx.plugins.unload("dsh-tool-mcp")
