"""The fake OpenAI chat-completions server: the wire format, scripting, faults, checks."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from dsh.testing.model_servers import (
    ChatReply,
    ChatToolCall,
    HTTPError,
    OpenAIChatServer,
    StreamFaults,
    check_request,
    echo_last_user_message,
    parse_sse,
    split_text,
)

pytestmark = pytest.mark.timeout(20)

USER = [{"role": "user", "content": "hello there"}]


def post(
    srv: OpenAIChatServer,
    body: Any,
    *,
    path: str = "/v1/chat/completions",
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    return srv.post_json(path, body, headers=headers)


def stream(srv: OpenAIChatServer, **extra: Any) -> list[Any]:
    """POST a streaming request; the chunks as JSON, then the final ``"[DONE]"``."""
    status, body = post(srv, {"model": "deepseek-chat", "messages": USER, "stream": True, **extra})
    assert status == 200, body
    return [e.data if e.data == "[DONE]" else e.json() for e in parse_sse(body)]


def deltas(chunks: list[Any]) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in chunks[:-1] if c["choices"]]


def test_text_streams_as_several_deltas() -> None:
    with OpenAIChatServer(ChatReply(text="Hello, streaming world!", text_chunks=4)) as srv:
        chunks = stream(srv)
    assert chunks[-1] == "[DONE]"
    first = chunks[0]
    assert first["object"] == "chat.completion.chunk"
    assert first["model"] == "deepseek-chat"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    pieces = [d["content"] for d in deltas(chunks)[1:] if d.get("content")]
    assert len(pieces) == 4
    assert "".join(pieces) == "Hello, streaming world!"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks[:-1])
    assert len({c["id"] for c in chunks[:-1]}) == 1


def test_usage_in_a_last_chunk_when_asked() -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 3}
    with OpenAIChatServer(ChatReply(text="hi", usage=usage)) as srv:
        chunks = stream(srv, stream_options={"include_usage": True})
    *body, last, done = chunks
    assert done == "[DONE]"
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    assert all(c["usage"] is None for c in body)


def test_usage_on_the_finish_chunk_deepseek_style() -> None:
    with OpenAIChatServer(ChatReply(text="two words", usage_with_finish=True)) as srv:
        chunks = stream(srv, stream_options={"include_usage": True})
    final = chunks[-2]
    assert final["choices"][0]["finish_reason"] == "stop"
    assert final["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}


def test_tool_calls_stream_as_the_real_api_does() -> None:
    reply = ChatReply(
        text="Let me look.",
        tool_calls=[
            ChatToolCall("read_file", {"path": "notes/today.txt", "lines": 20}),
            ChatToolCall("search", {"query": "dsh"}, id="call_given"),
        ],
        argument_chunks=4,
    )
    with OpenAIChatServer(reply) as srv:
        chunks = stream(srv)
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas(chunks):
        for part in delta.get("tool_calls", []):
            index = part["index"]
            if index not in calls:
                assert set(part) == {"index", "id", "type", "function"}
                assert part["type"] == "function"
                assert part["function"]["arguments"] == ""
                calls[index] = {"id": part["id"], "name": part["function"]["name"], "args": ""}
            else:
                assert set(part) == {"index", "function"}
                assert set(part["function"]) == {"arguments"}
                calls[index]["args"] += part["function"]["arguments"]
    assert calls[0]["name"] == "read_file"
    assert calls[0]["id"].startswith("call_fake_")
    assert json.loads(calls[0]["args"]) == {"path": "notes/today.txt", "lines": 20}
    assert calls[1] == {"id": "call_given", "name": "search", "args": '{"query":"dsh"}'}
    argument_deltas = [
        d for d in deltas(chunks) if d.get("tool_calls") and "id" not in d["tool_calls"][0]
    ]
    assert len(argument_deltas) == 8
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("finish", ["stop", "tool_calls", "length", "content_filter"])
def test_finish_reasons(finish: str) -> None:
    with OpenAIChatServer(ChatReply(text="x", finish_reason=finish)) as srv:
        chunks = stream(srv)
        status, body = post(srv, {"model": "m", "messages": USER})
    assert chunks[-2]["choices"][0]["finish_reason"] == finish
    assert status == 500  # one reply was scripted
    assert "no scripted response left" in body.decode()


def test_reasoning_content_streams_first() -> None:
    with OpenAIChatServer(ChatReply(text="42", reasoning="think hard", text_chunks=2)) as srv:
        found = deltas(stream(srv))
    assert [d["reasoning_content"] for d in found if d.get("reasoning_content")] == [
        "think",
        " hard",
    ]


def test_non_streamed_completion() -> None:
    reply = ChatReply(tool_calls=[ChatToolCall("read", {"path": "a"}, id="call_1")])
    with OpenAIChatServer("plain text", reply) as srv:
        status, body = post(srv, {"model": "gpt-x", "messages": USER})
        assert status == 200
        completion = json.loads(body)
        assert completion["object"] == "chat.completion"
        assert completion["model"] == "gpt-x"
        choice = completion["choices"][0]
        assert choice["message"]["content"] == "plain text"
        assert choice["finish_reason"] == "stop"
        assert completion["usage"]["total_tokens"] == 4
        completion = json.loads(post(srv, {"model": "gpt-x", "messages": USER})[1])
    message = completion["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "read", "arguments": '{"path":"a"}'},
        }
    ]
    assert completion["choices"][0]["finish_reason"] == "tool_calls"


def test_reply_as_a_function_of_the_request_and_both_paths() -> None:
    with OpenAIChatServer(default=echo_last_user_message("you said: ")) as srv:
        text = "".join(d.get("content") or "" for d in deltas(stream(srv)))
        assert text == "you said: hello there"
        _, body = post(srv, {"model": "m", "messages": USER}, path="/chat/completions")
        assert json.loads(body)["choices"][0]["message"]["content"] == "you said: hello there"
        assert srv.api_base == srv.base_url + "/v1"


def test_api_key_is_checked_when_set() -> None:
    with OpenAIChatServer(default="ok", api_key="sk-test") as srv:
        status, body = post(srv, {"model": "m", "messages": USER})
        assert status == 401
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
        status, _ = post(
            srv, {"model": "m", "messages": USER}, headers={"authorization": "Bearer sk-test"}
        )
        assert status == 200


BAD_REQUESTS: list[tuple[Any, str]] = [
    ([1], "could not parse"),
    ({"messages": USER}, "model parameter"),
    ({"model": "m", "messages": []}, "non-empty array"),
    ({"model": "m", "messages": USER, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "role must be one of"),
    ({"model": "m", "messages": [{"role": "user"}]}, "content"),
    ({"model": "m", "messages": USER, "tools": [{"type": "function"}]}, "tools[0]"),
    (
        {"model": "m", "messages": [*USER, {"role": "tool", "tool_call_id": "c1", "content": "r"}]},
        "must be a response to a preceding message with 'tool_calls'",
    ),
    (
        {
            "model": "m",
            "messages": [
                *USER,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                *USER,
            ],
        },
        "did not have response messages: c1",
    ),
    (
        {
            "model": "m",
            "messages": [
                *USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {}}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
            ],
        },
        "arguments': expected a string",
    ),
]


@pytest.mark.parametrize(("body", "message"), BAD_REQUESTS)
def test_strict_mode_rejects_what_the_real_api_rejects(body: Any, message: str) -> None:
    with OpenAIChatServer("never used") as srv:
        status, raw = post(srv, body)
        assert status == 400
        error = json.loads(raw)["error"]
        assert error["type"] == "invalid_request_error"
        assert message in error["message"]
        assert srv.pending == 1  # a rejected request does not use up the script


def test_a_valid_tool_round_trip_request_passes_the_checks() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            *USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c2", "content": "r2"},
            {"role": "tool", "tool_call_id": "c1", "content": "r1"},
            {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }
    assert check_request(body) is None
    with OpenAIChatServer(ChatReply(text="fine")) as srv:
        assert post(srv, body)[0] == 200


def test_faults_apply_to_chat_streams() -> None:
    with OpenAIChatServer(
        ChatReply(text="abc", faults=StreamFaults(malformed_after=2)),
        ChatReply(text="abc", faults=StreamFaults(delay=0.1)),
        HTTPError(500, "boom"),
    ) as srv:
        status, body = post(srv, {"model": "m", "messages": USER, "stream": True})
        assert parse_sse(body)[2].data == "{this is not json"
        started = time.monotonic()
        stream(srv)
        assert time.monotonic() - started >= 0.5  # 6 events
        status, body = post(srv, {"model": "m", "messages": USER, "stream": True})
        assert status == 500
        assert json.loads(body)["error"] == {
            "message": "boom",
            "type": "server_error",
            "param": None,
            "code": None,
        }


def test_split_text() -> None:
    assert split_text("abcdefg", 3) == ["abc", "de", "fg"]
    assert split_text("ab", 5) == ["a", "b"]
    assert split_text("", 3) == []
