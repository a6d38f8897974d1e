"""The adapter against the fake chat-completions server, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import socket
import time
from typing import Any

import anyio
import httpx
import pytest

from dsh.core import AbortSignal, ModelRequest, Usage
from dsh.core.models import ModelDone, ModelError, ModelStreamEvent, TextDelta, ToolCall, ToolSpec
from dsh.core.sessions import Event
from dsh.llm_openai import OpenAIChatAdapter, OpenAIOptions
from dsh.testing.model_servers import (
    ChatReply,
    ChatToolCall,
    Exchange,
    Hang,
    HTTPError,
    OpenAIChatServer,
    Reset,
    SSEEvent,
    StreamFaults,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(15)]

LOOKUP = ToolSpec(
    "lookup",
    "Look a word up.",
    {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
)


def request(text: str = "hi", *, tools: tuple[ToolSpec, ...] = (), model: str = "") -> ModelRequest:
    event = Event(0, "user/message", {"content": [{"type": "text", "text": text}]}, 0.0)
    return ModelRequest(model, "You are terse.", [event], tools)


async def collect(
    adapter: OpenAIChatAdapter, req: ModelRequest | None = None, signal: AbortSignal | None = None
) -> list[ModelStreamEvent]:
    return [e async for e in adapter.stream(req or request(), signal or AbortSignal())]


async def drain(
    adapter: OpenAIChatAdapter,
    into: list[ModelStreamEvent],
    signal: AbortSignal | None = None,
    *,
    abort_after_first: str | None = None,
) -> None:
    """Stream into ``into`` (kept when the stream fails); optionally abort after one event."""
    signal = signal or AbortSignal()
    async for event in adapter.stream(request(), signal):
        into.append(event)
        if abort_after_first is not None:
            signal.abort(abort_after_first)


def texts(found: list[ModelStreamEvent]) -> str:
    return "".join(e.text for e in found if isinstance(e, TextDelta))


async def test_streams_text_deltas_then_done(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 4}
    chat_server.script(ChatReply(text="Hello from the fake", text_chunks=3, usage=usage))
    async with OpenAIChatAdapter(options) as adapter:
        found = await collect(adapter)
    assert [type(e) for e in found] == [TextDelta, TextDelta, TextDelta, ModelDone]
    assert texts(found) == "Hello from the fake"
    assert found[-1] == ModelDone("end", Usage(7, 4))


async def test_tool_calls_are_assembled_from_deltas(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    chat_server.script(
        ChatReply(
            text="Looking.",
            tool_calls=[
                ChatToolCall("lookup", {"word": "dsh", "lang": "en"}, id="call_a"),
                ChatToolCall("lookup", {"word": "seam"}, id="call_b"),
            ],
            argument_chunks=5,
        )
    )
    async with OpenAIChatAdapter(options) as adapter:
        found = await collect(adapter, request(tools=(LOOKUP,)))
    assert texts(found) == "Looking."
    calls = [e for e in found if isinstance(e, ToolCall)]
    assert calls == [
        ToolCall("call_a", "lookup", {"word": "dsh", "lang": "en"}),
        ToolCall("call_b", "lookup", {"word": "seam"}),
    ]
    assert isinstance(found[-1], ModelDone)
    assert found[-1].stop_reason == "tool_calls"
    assert found.index(calls[0]) > max(i for i, e in enumerate(found) if isinstance(e, TextDelta))


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("stop", "end"),
        ("tool_calls", "tool_calls"),
        ("length", "max-tokens"),
        ("content_filter", "refusal"),
    ],
)
async def test_finish_reasons_map_to_stop_reasons(
    chat_server: OpenAIChatServer, options: OpenAIOptions, finish: str, stop: str
) -> None:
    calls = [ChatToolCall("lookup", {"word": "x"})] if finish == "tool_calls" else []
    chat_server.script(ChatReply(text="t", tool_calls=calls, finish_reason=finish))
    async with OpenAIChatAdapter(options) as adapter:
        found = await collect(adapter)
    done = found[-1]
    assert isinstance(done, ModelDone)
    assert done.stop_reason == stop


async def test_usage_on_the_finish_chunk_and_without_usage(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2}
    chat_server.script(ChatReply(text="a b", usage=usage, usage_with_finish=True), "no usage")
    async with OpenAIChatAdapter(options) as adapter:
        assert (await collect(adapter))[-1] == ModelDone("end", Usage(3, 2))
    quiet = options.model_copy(update={"include_usage": False})
    async with OpenAIChatAdapter(quiet) as adapter:
        assert (await collect(adapter))[-1] == ModelDone("end", None)
    assert "stream_options" not in chat_server.requests[1].json


async def test_invalid_tool_arguments_are_a_clear_model_error(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    chat_server.script(
        ChatReply(tool_calls=[ChatToolCall("lookup", '{"word": "unterminated', id="call_x")]),
        ChatReply(tool_calls=[ChatToolCall("lookup", "[1, 2]")]),
    )
    async with OpenAIChatAdapter(options) as adapter:
        with pytest.raises(
            ModelError, match=r'invalid arguments for tool "lookup" \(call call_x\)'
        ):
            await collect(adapter)
        with pytest.raises(ModelError, match="expected a JSON object, got list"):
            await collect(adapter)


async def test_arguments_cut_by_the_token_limit_are_dropped(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    cut = ChatToolCall("lookup", '{"word": "hal')
    chat_server.script(ChatReply(text="partial", tool_calls=[cut], finish_reason="length"))
    async with OpenAIChatAdapter(options) as adapter:
        found = await collect(adapter)
    assert not any(isinstance(e, ToolCall) for e in found)
    done = found[-1]
    assert isinstance(done, ModelDone)
    assert done.stop_reason == "max-tokens"


async def test_missing_api_key_names_the_variable(
    chat_server: OpenAIChatServer, options: OpenAIOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DSH_TEST_NO_SUCH_KEY", raising=False)
    keyed = options.model_copy(update={"api_key_env": "DSH_TEST_NO_SUCH_KEY"})
    async with OpenAIChatAdapter(keyed) as adapter:
        with pytest.raises(
            ModelError, match="environment variable DSH_TEST_NO_SUCH_KEY is not set"
        ):
            await collect(adapter)
    assert chat_server.requests == []


async def test_api_key_is_sent_as_a_bearer_token(
    options: OpenAIOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_TEST_KEY", "sk-test-123")
    with OpenAIChatServer("ok", api_key="sk-test-123") as srv:
        keyed = options.model_copy(update={"api_key_env": "DSH_TEST_KEY", "base_url": srv.api_base})
        async with OpenAIChatAdapter(keyed) as adapter:
            assert texts(await collect(adapter)) == "ok"
        assert srv.last_request.header("authorization") == "Bearer sk-test-123"


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    ("status", "message"),
    [(500, "The server had an error"), (401, "Incorrect API key"), (429, "Rate limit reached")],
)
async def test_http_errors_carry_status_and_server_message(
    chat_server: OpenAIChatServer, options: OpenAIOptions, status: int, message: str
) -> None:
    headers = {"retry-after": "3"} if status == 429 else {}
    chat_server.script(HTTPError(status, message, headers=headers))
    started = time.monotonic()
    async with OpenAIChatAdapter(options) as adapter:
        with pytest.raises(ModelError) as caught:
            await collect(adapter)
    assert time.monotonic() - started < 2
    assert caught.value.status == status
    text = str(caught.value)
    assert f"HTTP {status}" in text
    assert message in text
    assert chat_server.api_base in text
    if status == 429:
        assert "retry after 3 s" in text


async def test_error_body_that_is_not_json(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    async def html(exchange: Exchange) -> None:
        await exchange.send(502, b"<html>Bad Gateway</html>", content_type="text/html")

    chat_server.route("POST", "/v1/chat/completions", html)
    async with OpenAIChatAdapter(options) as adapter:
        with pytest.raises(ModelError, match=r"HTTP 502 Bad Gateway .*<html>Bad Gateway</html>"):
            await collect(adapter)


@pytest.mark.timeout(5)
async def test_malformed_stream_is_a_model_error(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    chat_server.script(ChatReply(text="abc", faults=StreamFaults(malformed_after=2)))
    async with OpenAIChatAdapter(options) as adapter:
        with pytest.raises(ModelError, match="malformed stream: an event is not valid JSON"):
            await collect(adapter)


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    ("faults", "message"),
    [
        (StreamFaults(reset_after=2), "connection to .* (was lost|broke) mid-response"),
        (StreamFaults(close_after=2), "connection to .* broke mid-response"),
    ],
)
async def test_connection_cut_mid_stream_is_a_model_error(
    chat_server: OpenAIChatServer, options: OpenAIOptions, faults: StreamFaults, message: str
) -> None:
    chat_server.script(ChatReply(text="abcdef", text_chunks=4, faults=faults))
    seen: list[ModelStreamEvent] = []
    async with OpenAIChatAdapter(options) as adapter:
        with pytest.raises(ModelError, match=message):
            await drain(adapter, seen)
    assert texts(seen) == "ab"  # the deltas before the cut still arrived


@pytest.mark.timeout(5)
async def test_reset_before_any_response(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    chat_server.script(Reset())
    async with OpenAIChatAdapter(options) as adapter:
        with pytest.raises(ModelError, match=chat_server.api_base):
            await collect(adapter)


@pytest.mark.timeout(5)
async def test_a_stalled_server_hits_the_read_timeout(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    chat_server.script(Hang(), ChatReply(text="abc", faults=StreamFaults(hang_after=2)))
    impatient = options.model_copy(update={"read_timeout": 0.3})
    async with OpenAIChatAdapter(impatient) as adapter:
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(ModelError, match=r"no data from .* for 0\.3 s \(read timeout\)"):
                await collect(adapter)
            assert time.monotonic() - started < 2


async def test_stream_cut_without_finish_or_done(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    async def truncated(exchange: Exchange) -> None:
        delta = {"choices": [{"index": 0, "delta": {"content": "half"}, "finish_reason": None}]}
        await exchange.stream([SSEEvent(delta)])

    chat_server.route("POST", "/v1/chat/completions", truncated)
    async with OpenAIChatAdapter(options) as adapter:
        with pytest.raises(ModelError, match="stream ended before the response was complete"):
            await collect(adapter)


async def test_error_event_mid_stream(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    async def failing(exchange: Exchange) -> None:
        await exchange.stream([SSEEvent({"error": {"message": "upstream overloaded"}})])

    chat_server.route("POST", "/v1/chat/completions", failing)
    async with OpenAIChatAdapter(options) as adapter:
        with pytest.raises(ModelError, match="error mid-stream: upstream overloaded"):
            await collect(adapter)


async def test_a_json_answer_to_a_stream_request_is_understood(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    completion: dict[str, Any] = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "whole",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"word":"w"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6},
    }

    async def whole(exchange: Exchange) -> None:
        await exchange.send_json(200, completion)

    chat_server.route("POST", "/v1/chat/completions", whole)
    async with OpenAIChatAdapter(options) as adapter:
        found = await collect(adapter)
    assert found == [
        TextDelta("whole"),
        ToolCall("c1", "lookup", {"word": "w"}),
        ModelDone("tool_calls", Usage(5, 6)),
    ]


@pytest.mark.timeout(5)
async def test_abort_signal_mid_stream_closes_the_connection(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    chat_server.script(ChatReply(text="abcdef", text_chunks=3, faults=StreamFaults(hang_after=2)))
    signal = AbortSignal()
    seen: list[ModelStreamEvent] = []
    async with OpenAIChatAdapter(options) as adapter:
        with pytest.raises(ModelError, match=r"aborted \(user said stop\)"):
            await drain(adapter, seen, signal, abort_after_first="user said stop")
        await chat_server.async_wait_until(lambda: chat_server.requests[0].client_disconnected)
    assert seen == [TextDelta("ab")]


async def test_an_aborted_signal_sends_nothing(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    signal = AbortSignal()
    signal.abort("too late")
    async with OpenAIChatAdapter(options) as adapter:
        with pytest.raises(ModelError, match="aborted"):
            await collect(adapter, signal=signal)
    assert chat_server.requests == []


@pytest.mark.timeout(5)
async def test_cancelling_the_caller_closes_the_connection(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    chat_server.script(ChatReply(text="abcdef", faults=StreamFaults(hang_after=2)))
    seen: list[ModelStreamEvent] = []
    async with OpenAIChatAdapter(options) as adapter:
        with anyio.CancelScope() as scope:
            async for event in adapter.stream(request(), AbortSignal()):
                seen.append(event)
                scope.cancel()
        assert scope.cancelled_caught  # a cancellation, not a ModelError
        await chat_server.async_wait_until(lambda: chat_server.requests[0].client_disconnected)
    assert len(seen) == 1


async def test_cannot_connect(options: OpenAIOptions) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    closed = options.model_copy(update={"base_url": f"http://127.0.0.1:{port}/v1"})
    async with OpenAIChatAdapter(closed) as adapter:
        with pytest.raises(ModelError, match=f"cannot connect to http://127.0.0.1:{port}/v1"):
            await collect(adapter)


async def test_connections_are_pooled_across_calls(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    chat_server.script("one", "two", "three")
    async with OpenAIChatAdapter(options) as adapter:
        for _ in range(3):
            await collect(adapter)
    assert {r.connection for r in chat_server.requests} == {1}


async def test_request_body(chat_server: OpenAIChatServer, options: OpenAIOptions) -> None:
    chat_server.script("ok", "ok")
    extra = options.model_copy(
        update={"extra_body": {"temperature": 0.1, "max_tokens": 64}, "headers": {"x-org": "o"}}
    )
    async with OpenAIChatAdapter(extra) as adapter:
        await collect(adapter, request("what is dsh?", tools=(LOOKUP,)))
        await collect(adapter, request(model="deepseek-reasoner"))
    first, second = chat_server.requests
    assert first.url_path == "/v1/chat/completions"
    assert first.header("x-org") == "o"
    assert first.header("authorization") is None
    assert first.json == {
        "model": "deepseek-chat",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "what is dsh?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": "Look a word up.",
                    "parameters": dict(LOOKUP.parameters),
                },
            }
        ],
        "temperature": 0.1,
        "max_tokens": 64,
    }
    assert second.json["model"] == "deepseek-reasoner"
    assert "tools" not in second.json


class _Counting(httpx.AsyncBaseTransport):
    """A real HTTP transport that counts the requests it carries and its closes."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.requests: list[str] = []
        self.closed = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(str(request.url))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        self.closed += 1
        await self.inner.aclose()


async def test_with_transport_sends_the_same_model_s_calls_over_it(
    chat_server: OpenAIChatServer, options: OpenAIOptions
) -> None:
    chat_server.default = ChatReply(text="over the transport")
    transport = _Counting()
    async with OpenAIChatAdapter(options, model="m-1") as adapter:
        other = adapter.with_transport(transport)
        assert (other.model, other.options) == (adapter.model, adapter.options)
        events = await collect(other)
        await other.aclose()
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "over the transport"
    assert transport.requests == [options.url]
    assert chat_server.requests[0].json["model"] == "m-1"
    assert transport.closed == 1  # the adapter's own client closed its transport
