"""The fake Anthropic Messages server: the wire format, rules by content, faults, checks."""

from __future__ import annotations

import http.client
import json
import re
import socket
from typing import Any

import pytest

from dsh.testing.model_servers import (
    AnthropicMessagesServer,
    Hang,
    HTTPError,
    MessagesReply,
    Reset,
    StreamFaults,
    ToolUse,
    parse_sse,
)
from dsh.testing.model_servers.anthropic_messages import (
    check_messages_request,
    reply_with_tool_result,
    tool_step,
)

pytestmark = pytest.mark.timeout(20)

REMINDER = {"type": "text", "text": "<system-reminder>\nlots of context\n</system-reminder>"}


def prompt(text: str) -> list[dict[str, Any]]:
    """A first user message shaped as Claude Code sends it: a reminder block, then the text."""
    return [{"role": "user", "content": [REMINDER, {"type": "text", "text": text}]}]


def body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 1024, "messages": messages, **extra}


def post(
    srv: AnthropicMessagesServer,
    payload: Any,
    *,
    path: str = "/v1/messages?beta=true",
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    return srv.post_json(path, payload, headers=headers)


def events(srv: AnthropicMessagesServer, messages: list[dict[str, Any]]) -> list[Any]:
    status, raw = post(srv, body(messages, stream=True))
    assert status == 200, raw
    parsed = parse_sse(raw)
    for event in parsed:  # every event names its type twice, as the real API does
        assert event.event == event.json()["type"]
    return [e.json() for e in parsed]


def streamed_text(got: list[Any]) -> str:
    return "".join(e["delta"].get("text", "") for e in got if e["type"] == "content_block_delta")


def test_text_streams_in_the_messages_event_order() -> None:
    with AnthropicMessagesServer(MessagesReply(text="Hello from the fake", text_chunks=3)) as srv:
        got = events(srv, prompt("hi"))
    assert [e["type"] for e in got] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = got[0]["message"]
    assert start["role"] == "assistant"
    assert start["model"] == "claude-x"
    assert start["content"] == []
    assert start["stop_reason"] is None
    assert start["usage"]["input_tokens"] > 0
    assert got[2]["content_block"] == {"type": "text", "text": ""}
    assert "".join(e["delta"]["text"] for e in got[3:6]) == "Hello from the fake"
    assert got[7]["delta"]["stop_reason"] == "end_turn"
    assert got[7]["usage"]["output_tokens"] == 4


def test_tool_use_streams_its_input_as_json_deltas() -> None:
    reply = MessagesReply(
        text="Let me look.", tool_uses=[ToolUse("Bash", {"command": "ls -la"}, id="toolu_1")]
    )
    with AnthropicMessagesServer(reply) as srv:
        got = events(srv, prompt("list files"))
    blocks = [e for e in got if e["type"] == "content_block_start"]
    assert [b["content_block"]["type"] for b in blocks] == ["text", "tool_use"]
    assert blocks[1]["index"] == 1
    assert blocks[1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "Bash",
        "input": {},
    }
    pieces = [
        e["delta"]["partial_json"]
        for e in got
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    ]
    assert len(pieces) == 2
    assert json.loads("".join(pieces)) == {"command": "ls -la"}
    assert got[-2]["delta"]["stop_reason"] == "tool_use"


def test_non_streaming_answer_is_the_finished_message() -> None:
    reply = MessagesReply(
        tool_uses=[ToolUse("Read", '{"file_path": "/x"}')], usage={"input_tokens": 7}
    )
    with AnthropicMessagesServer(reply) as srv:
        status, raw = post(srv, body(prompt("read it")), path="/v1/messages")
    assert status == 200
    message = json.loads(raw)
    assert message["type"] == "message"
    assert message["stop_reason"] == "tool_use"
    (use,) = message["content"]
    assert use["name"] == "Read"
    assert use["input"] == {"file_path": "/x"}
    assert use["id"].startswith("toolu_")
    assert message["usage"]["input_tokens"] == 7


def test_rules_match_anywhere_in_user_text_and_step_through_a_tool_round_trip() -> None:
    srv = AnthropicMessagesServer()
    srv.when(
        "run pwd",
        MessagesReply(tool_uses=[ToolUse("Bash", {"command": "pwd"}, id="toolu_7")]),
        reply_with_tool_result("Tool said: {output} (error: {is_error})"),
    )
    srv.when(re.compile(r"say (\w+)"), "said it")
    with srv:
        first = events(srv, prompt("please run pwd now"))
        assert first[2]["content_block"]["name"] == "Bash"
        answered = [
            *prompt("please run pwd now"),
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_7", "name": "Bash", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_7",
                        "content": [{"type": "text", "text": "/work"}],
                        "is_error": False,
                    }
                ],
            },
        ]
        second = events(srv, answered)
        assert streamed_text(second) == "Tool said: /work (error: False)"
        assert tool_step(srv.requests[1]) == 1
        assert tool_step(srv.requests[0]) == 0
        third = events(srv, prompt("can you say cheese"))
        assert streamed_text(third) == "said it"
        assert len(srv.matching("run pwd")) == 2
        # no rule, empty queue: an error naming the problem
        status, raw = post(srv, body(prompt("something else")))
    assert status == 500
    assert json.loads(raw)["error"]["type"] == "api_error"
    assert "no scripted response left" in json.loads(raw)["error"]["message"]


def test_http_errors_use_anthropics_error_shape() -> None:
    with AnthropicMessagesServer(
        HTTPError(529, "Overloaded"), HTTPError(429, "slow down", headers={"retry-after": "0"})
    ) as srv:
        status, raw = post(srv, body(prompt("x"), stream=True))
        assert status == 529
        assert json.loads(raw) == {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
        }
        status, raw = post(srv, body(prompt("x")))
        assert status == 429
        assert json.loads(raw)["error"]["type"] == "rate_limit_error"


def test_bad_requests_and_bad_keys_are_refused() -> None:
    with AnthropicMessagesServer(default="ok", api_key="sk-fake") as srv:
        status, raw = post(srv, body(prompt("x")), headers={"x-api-key": "wrong"})
        assert status == 401
        assert json.loads(raw)["error"]["type"] == "authentication_error"
        status, raw = post(srv, {"model": "m", "messages": []}, headers={"x-api-key": "sk-fake"})
        assert status == 400
        assert "max_tokens" in json.loads(raw)["error"]["message"]
        status, _ = post(srv, body(prompt("x")), headers={"x-api-key": "sk-fake"})
        assert status == 200
        status, raw = post(
            srv,
            {"messages": prompt("x")},
            path="/v1/messages/count_tokens",
            headers={"x-api-key": "sk-fake"},
        )
        assert status == 200
        assert json.loads(raw)["input_tokens"] > 0
    orphan = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]},
    ]
    problem = check_messages_request(body(orphan))
    assert problem is not None
    assert "toolu_9" in problem
    assert check_messages_request(body(prompt("fine"))) is None


def test_a_stream_can_stall_mid_message_until_the_client_leaves() -> None:
    stall = MessagesReply(text="partial answer", faults=StreamFaults(hang_after=4))
    with AnthropicMessagesServer(stall) as srv:
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        payload = json.dumps(body(prompt("x"), stream=True)).encode()
        sock.sendall(
            b"POST /v1/messages?beta=true HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        received = b""
        while b"content_block_delta" not in received:
            received += sock.recv(65536)
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(65536)  # stalled: nothing more comes
        sock.close()
        srv.wait_until(lambda: srv.requests[0].client_disconnected)
    assert b"message_stop" not in received
    assert srv.requests[0].status == 200
    assert not srv.requests[0].finished


def test_hang_and_reset_items() -> None:
    with AnthropicMessagesServer(Reset(), Hang()) as srv:
        with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
            post(srv, body(prompt("x")))
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=0.3)
        conn.request("POST", "/v1/messages", json.dumps(body(prompt("x"))))
        with pytest.raises(TimeoutError):
            conn.getresponse()
        conn.close()
        assert [r.status for r in srv.requests] == [None, None]
