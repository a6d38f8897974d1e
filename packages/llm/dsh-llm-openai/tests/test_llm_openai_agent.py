"""A real dsh agent on the ``openai`` adapter, against the fake server over HTTP."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from dsh.core import Context, ToolContext, parse_preset, tool
from dsh.core.models import ModelConfig
from dsh.core.sessions import Event
from dsh.llm_openai import SharedClient
from dsh.testing.model_servers import (
    ChatReply,
    ChatToolCall,
    HTTPError,
    OpenAIChatServer,
    Reset,
    StreamFaults,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]


class Lookup(BaseModel):
    word: str


@tool("lookup", "Look a word up in the glossary.")
async def lookup(args: Lookup, tctx: ToolContext) -> str:
    return f"{args.word}: a small agent toolkit"


class Wait(BaseModel):
    pass


@tool("wait_forever", "Never returns.")
async def wait_forever(args: Wait, tctx: ToolContext) -> str:
    await anyio.sleep_forever()
    return "unreachable"


def model(srv: OpenAIChatServer, **options: Any) -> ModelConfig:
    return ModelConfig(
        adapter="openai",
        options={"base_url": srv.api_base, "api_key_env": "", "read_timeout": 5, **options},
    )


@asynccontextmanager
async def context() -> AsyncIterator[Context]:
    async with Context.open() as ctx:
        await ctx.plugins.load("dsh-llm-openai")  # through the real entry point
        ctx.tools.register(lookup)
        ctx.tools.register(wait_forever)
        yield ctx


def of_type(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.type == kind]


async def test_a_tool_round_trip(chat_server: OpenAIChatServer) -> None:
    chat_server.script(
        ChatReply(
            text="Let me check.",
            tool_calls=[ChatToolCall("lookup", {"word": "dsh"}, id="call_1")],
            usage={"prompt_tokens": 20, "completion_tokens": 9},
        ),
        ChatReply(text="dsh is a small agent toolkit.", text_chunks=4),
    )
    async with context() as ctx:
        agent = ctx.agents.create(model=model(chat_server))
        deltas: list[str] = []
        agent.observe(
            lambda e: deltas.append(e.data["text"]) if e.type == "assistant/delta" else None
        )
        outcome = await agent.run("What is dsh?")
        assert (outcome.stop_reason, outcome.error) == ("completed", None)
        events = list(agent.session.events)
    assert [e.type for e in events if e.type.startswith(("assistant/", "tool/"))] == [
        "assistant/message",
        "tool/call",
        "tool/result",
        "assistant/message",
    ]
    (call,) = of_type(events, "tool/call")
    assert dict(call.data) == {"id": "call_1", "name": "lookup", "arguments": {"word": "dsh"}}
    first, last = of_type(events, "assistant/message")
    usage = dict(first.data["usage"])
    assert usage.pop("cost_usd") > 0  # deepseek-chat, priced from the genai-prices table
    assert usage == {"input_tokens": 20, "output_tokens": 9}
    assert first.data["stop_reason"] == "tool_calls"
    assert last.data["content"] == [{"type": "text", "text": "dsh is a small agent toolkit."}]
    assert "".join(deltas) == "Let me check.dsh is a small agent toolkit."

    one, two = chat_server.requests
    assert one.json["stream"] is True
    assert one.json["stream_options"] == {"include_usage": True}
    assert one.json["model"] == "deepseek-chat"
    assert [t["function"]["name"] for t in one.json["tools"]] == ["lookup", "wait_forever"]
    assert one.json["tools"][0]["function"]["parameters"]["properties"] == {
        "word": {"title": "Word", "type": "string"}
    }
    assert [m["role"] for m in one.json["messages"]] == ["system", "user"]
    assert one.json["messages"][1] == {"role": "user", "content": "What is dsh?"}
    assert two.json["messages"][1:] == [
        {"role": "user", "content": "What is dsh?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"word": "dsh"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "dsh: a small agent toolkit"},
    ]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("status", "message"),
    [(500, "The server had an error"), (401, "Authentication Fails"), (429, "Rate limit reached")],
)
async def test_http_errors_end_the_turn_with_error_promptly(
    chat_server: OpenAIChatServer, status: int, message: str
) -> None:
    chat_server.script(HTTPError(status, message))
    async with context() as ctx:
        agent = ctx.agents.create(model=model(chat_server))
        started = time.monotonic()
        outcome = await agent.run("hi")
        assert time.monotonic() - started < 3
    assert outcome.stop_reason == "error"
    assert outcome.error is not None
    assert f"HTTP {status}" in outcome.error
    assert message in outcome.error


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("item", "message"),
    [
        (ChatReply(text="abc", faults=StreamFaults(malformed_after=1)), "malformed stream"),
        (ChatReply(text="abcdef", faults=StreamFaults(reset_after=2)), "mid-response"),
        (Reset(), "127.0.0.1"),
    ],
)
async def test_broken_streams_end_the_turn_with_error(
    chat_server: OpenAIChatServer, item: Any, message: str
) -> None:
    chat_server.script(item)
    async with context() as ctx:
        agent = ctx.agents.create(model=model(chat_server))
        started = time.monotonic()
        outcome = await agent.run("hi")
        assert time.monotonic() - started < 3
    assert outcome.stop_reason == "error"
    assert outcome.error is not None
    assert message in outcome.error


async def test_a_missing_key_ends_the_turn_naming_the_variable(
    chat_server: OpenAIChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DSH_TEST_ABSENT_KEY", raising=False)
    async with context() as ctx:
        agent = ctx.agents.create(model=model(chat_server, api_key_env="DSH_TEST_ABSENT_KEY"))
        outcome = await agent.run("hi")
    assert outcome.stop_reason == "error"
    assert outcome.error is not None
    assert "DSH_TEST_ABSENT_KEY is not set" in outcome.error
    assert chat_server.requests == []


@pytest.mark.timeout(10)
async def test_cancel_mid_stream_aborts_and_closes_the_connection(
    chat_server: OpenAIChatServer,
) -> None:
    chat_server.script(ChatReply(text="abcdef", text_chunks=3, faults=StreamFaults(hang_after=2)))
    async with context() as ctx:
        agent = ctx.agents.create(model=model(chat_server))
        first = anyio.Event()
        agent.observe(lambda e: first.set() if e.type == "assistant/delta" else None)
        agent.followup("hi")
        with anyio.fail_after(5):
            await first.wait()
        agent.cancel("user pressed stop")
        with anyio.fail_after(5):
            await agent.when_idle()
        (end,) = of_type(list(agent.session.events), "turn/end")
        assert end.data["stop_reason"] == "aborted"
        assert end.data["error"] == "user pressed stop"
        await chat_server.async_wait_until(lambda: chat_server.requests[0].client_disconnected)


@pytest.mark.timeout(10)
async def test_a_turn_cancelled_mid_tool_can_be_followed_up(
    chat_server: OpenAIChatServer,
) -> None:
    chat_server.script(
        ChatReply(tool_calls=[ChatToolCall("wait_forever", {}, id="call_w")]),
        ChatReply(text="ok, moving on"),
    )
    async with context() as ctx:
        agent = ctx.agents.create(model=model(chat_server))
        called = anyio.Event()
        agent.observe(lambda e: called.set() if e.type == "tool/call" else None)
        agent.followup("wait")
        with anyio.fail_after(5):
            await called.wait()
        await anyio.sleep(0.05)
        agent.cancel("enough")
        await agent.when_idle()
        outcome = await agent.run("something else")
    assert outcome.stop_reason == "completed"
    # The strict fake accepted the history: the unanswered call got a placeholder result.
    messages = chat_server.requests[1].json["messages"]
    assert messages[-2] == {
        "role": "tool",
        "tool_call_id": "call_w",
        "content": "(no result: the tool call was interrupted before it finished)",
    }
    assert messages[-1] == {"role": "user", "content": "something else"}


async def test_preset_plugin_row_defaults_and_a_second_adapter_name(
    chat_server: OpenAIChatServer,
) -> None:
    chat_server.script("from the preset", "from the local row")
    preset = parse_preset(
        f"""
        [agent.model]
        adapter = "openai"
        model = "my-model"

        [[plugin]]
        name = "dsh-llm-openai"
        config = {{ base_url = "{chat_server.api_base}", api_key_env = "" }}

        [[plugin]]
        id = "local"
        name = "dsh-llm-openai"
        [plugin.config]
        adapter = "local"
        base_url = "{chat_server.base_url}"
        api_key_env = ""
        model = "local-default"
        extra_body = {{ temperature = 0 }}
        """
    )
    async with Context.open(preset) as ctx:
        assert {"openai", "local"} <= set(ctx.llm.adapters())
        outcome = await ctx.agents.create().run("hi")
        assert outcome.stop_reason == "completed"
        local = ctx.agents.create(model=ModelConfig(adapter="local"))
        assert (await local.run("hi")).stop_reason == "completed"
        await ctx.plugins.unload("local")
        assert "local" not in ctx.llm.adapters()
    first, second = chat_server.requests
    assert (first.url_path, first.json["model"]) == ("/v1/chat/completions", "my-model")
    assert (second.url_path, second.json["model"]) == ("/chat/completions", "local-default")
    assert second.json["temperature"] == 0


async def test_unloading_closes_the_shared_client(chat_server: OpenAIChatServer) -> None:
    chat_server.script("one")
    async with context() as ctx:
        agent = ctx.agents.create(model=model(chat_server))
        assert (await agent.run("hi")).stop_reason == "completed"
        clients = agent.model.adapter._clients  # type: ignore[attr-defined]
        assert isinstance(clients, SharedClient)
        await ctx.plugins.unload("dsh-llm-openai")
        outcome = await agent.run("again")
    assert outcome.stop_reason == "error"
    assert outcome.error is not None
    assert "HTTP client of this model was closed" in outcome.error


async def test_bad_model_options_fail_at_create(chat_server: OpenAIChatServer) -> None:
    async with context() as ctx:
        with pytest.raises(ValueError, match="invalid openai model options: read_timeout"):
            ctx.agents.create(model=model(chat_server, read_timeout=0))
