"""The fake OpenAI Responses server: the wire format, rules, scripting, faults, checks.

(The real Codex CLI against this server is tested in dsh-subagent-codex.)
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
from typing import Any

import pytest

from dsh.testing.model_servers import (
    FunctionCall,
    Hang,
    HTTPError,
    OpenAIResponsesServer,
    Reset,
    ResponseFailed,
    ResponsesReply,
    StreamFaults,
    parse_sse,
    reply_with_tool_output,
)
from dsh.testing.model_servers.openai_responses import (
    check_responses_request,
    latest_user_input_text,
    tool_outputs,
    tool_step,
)

pytestmark = pytest.mark.timeout(20)

DEV = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]}


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def body(*items: dict[str, Any], stream: bool = True) -> dict[str, Any]:
    return {"model": "gpt-5.5", "input": [DEV, *items], "stream": stream, "store": False}


def post(
    srv: OpenAIResponsesServer,
    payload: Any,
    *,
    path: str = "/v1/responses",
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    return srv.post_json(path, payload, headers=headers)


def events(srv: OpenAIResponsesServer, payload: Any) -> list[tuple[str | None, dict[str, Any]]]:
    status, raw = post(srv, payload)
    assert status == 200, raw
    return [(e.event, e.json()) for e in parse_sse(raw)]


def test_text_reply_streams_the_events_codex_reads() -> None:
    with OpenAIResponsesServer(
        ResponsesReply(text="Hello, streaming world!", text_chunks=3)
    ) as srv:
        got = events(srv, body(user("hi")))
    kinds = [kind for kind, _ in got]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert all(data["type"] == kind for kind, data in got)
    assert [data["sequence_number"] for _, data in got] == list(range(len(got)))
    text = "".join(d["delta"] for k, d in got if k == "response.output_text.delta")
    assert text == "Hello, streaming world!"
    done = got[-1][1]["response"]
    assert done["status"] == "completed"
    assert done["model"] == "gpt-5.5"
    (message,) = done["output"]
    assert message["type"] == "message"
    assert message["role"] == "assistant"
    assert message["content"][0] == {
        "type": "output_text",
        "text": "Hello, streaming world!",
        "annotations": [],
    }
    usage = done["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["output_tokens"] == 3


def test_function_calls_stream_their_arguments() -> None:
    call = FunctionCall("exec_command", {"cmd": "echo hi"}, call_id="call_1")
    reply = ResponsesReply(text="Running it.", function_calls=[call], argument_chunks=3)
    with OpenAIResponsesServer(reply) as srv:
        got = events(srv, body(user("run")))
    added = [d["item"] for k, d in got if k == "response.output_item.added"]
    assert [i["type"] for i in added] == ["message", "function_call"]
    assert added[1]["arguments"] == ""
    assert added[1]["status"] == "in_progress"
    pieces = [d["delta"] for k, d in got if k == "response.function_call_arguments.delta"]
    assert len(pieces) == 3
    assert "".join(pieces) == '{"cmd":"echo hi"}'
    done = [d["item"] for k, d in got if k == "response.output_item.done"]
    assert done[1] == {
        "id": done[1]["id"],
        "type": "function_call",
        "status": "completed",
        "name": "exec_command",
        "call_id": "call_1",
        "arguments": '{"cmd":"echo hi"}',
    }
    assert [d["output_index"] for k, d in got if k == "response.output_item.done"] == [0, 1]


def test_rules_match_the_latest_user_input_and_pick_replies_by_tool_step() -> None:
    srv = OpenAIResponsesServer(default="fallback")
    srv.when(
        "run echo",
        ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": "echo hi"}, "c1")]),
        reply_with_tool_output("Tool said: {output}"),
    )
    srv.when(re.compile(r"fail \d+"), HTTPError(503, "overloaded"))
    srv.when(lambda request: "x-special" in request.headers, "special")
    with srv:
        first = events(srv, body(user("please run echo")))
        assert first[-1][1]["response"]["output"][0]["type"] == "function_call"
        call = {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"}
        result = {"type": "function_call_output", "call_id": "c1", "output": "hi\n"}
        second = events(srv, body(user("please run echo"), call, result))
        texts = [d["delta"] for k, d in second if k == "response.output_text.delta"]
        assert "".join(texts) == "Tool said: hi\n"
        # an older user message does not match: only the latest counts
        other = events(srv, body(user("please run echo"), user("something else")))
        assert "".join(d["delta"] for k, d in other if k.endswith(".delta")) == "fallback"
        status, raw = post(srv, body(user("fail 42")))
        assert status == 503
        assert json.loads(raw)["error"]["message"] == "overloaded"
        special = post(srv, body(user("x")), headers={"x-special": "1"})
        assert b"special" in special[1]
    assert [tool_step(r) for r in srv.requests] == [0, 1, 0, 0, 0]
    assert [latest_user_input_text(r) for r in srv.requests][:3] == [
        "please run echo",
        "please run echo",
        "something else",
    ]
    assert tool_outputs(srv.requests[1]) == ["hi\n"]
    assert len(srv.matching("run echo")) == 2
    assert srv.pending == 0


def test_script_queue_then_default_then_exhausted() -> None:
    with OpenAIResponsesServer("one", ResponsesReply(text="two")) as srv:
        for expected in ("one", "two"):
            got = events(srv, body(user("q")))
            assert got[-1][1]["response"]["output"][0]["content"][0]["text"] == expected
        status, raw = post(srv, body(user("q")))
    assert status == 500
    assert "no scripted response left" in json.loads(raw)["error"]["message"]


def test_response_failed_and_non_streamed_replies() -> None:
    with OpenAIResponsesServer(ResponseFailed("model crashed", "server_error"), "plain") as srv:
        got = events(srv, body(user("q")))
        status, raw = post(srv, body(user("q"), stream=False))
    assert [k for k, _ in got] == ["response.created", "response.failed"]
    failed = got[1][1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "model crashed"}
    assert status == 200
    response = json.loads(raw)
    assert response["object"] == "response"
    assert response["output"][0]["content"][0]["text"] == "plain"


def test_stall_mid_stream_keeps_the_connection_open_until_the_client_leaves() -> None:
    reply = ResponsesReply(text="abcdef", text_chunks=3, faults=StreamFaults(hang_after=5))
    with OpenAIResponsesServer(reply) as srv:
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        payload = json.dumps(body(user("q"))).encode()
        head = f"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: {len(payload)}\r\n\r\n"
        sock.sendall(head.encode() + payload)
        received = b""
        deadline = time.monotonic() + 5
        while b"response.output_text.delta" not in received and time.monotonic() < deadline:
            received += sock.recv(65536)
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(65536)  # nothing more comes: stalled
        request = srv.requests[0]
        assert request.status == 200
        assert not request.finished
        sock.close()
        srv.wait_until(lambda: request.client_disconnected)
    assert b'"delta":"ab"' in received


def test_hang_sends_no_headers_and_reset_resets() -> None:
    with OpenAIResponsesServer(Hang(), Reset()) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=0.5)
        conn.request("POST", "/v1/responses", json.dumps(body(user("q"))))
        with pytest.raises(TimeoutError):
            conn.getresponse()
        conn.close()
        srv.wait_until(lambda: srv.requests[0].client_disconnected)
        assert srv.requests[0].status is None
        with pytest.raises(ConnectionError):
            post(srv, body(user("q")))


def test_strict_checks_and_api_key() -> None:
    with OpenAIResponsesServer(default="ok", api_key="sk-test") as srv:
        status, raw = post(srv, body(user("q")))
        assert status == 401
        assert json.loads(raw)["error"]["code"] == "invalid_api_key"
        auth = {"authorization": "Bearer sk-test"}
        status, raw = post(srv, {"input": [user("q")]}, headers=auth)
        assert status == 400
        assert "model" in json.loads(raw)["error"]["message"]
        orphan = {"type": "function_call_output", "call_id": "nope", "output": "x"}
        status, raw = post(srv, body(user("q"), orphan), headers=auth)
        assert status == 400
        assert "call_id nope" in json.loads(raw)["error"]["message"]
        status, _ = post(srv, body(user("q")), path="/responses", headers=auth)
        assert status == 200
    assert check_responses_request({"model": "m", "input": "just text"}) is None
    assert check_responses_request({"model": "m", "input": []}) is not None
    assert check_responses_request([]) is not None


def test_a_namespaced_call_and_a_raw_item_go_out_as_given() -> None:
    search = {"type": "tool_search_call", "call_id": "s1", "execution": "client", "arguments": {}}
    reply = ResponsesReply(
        function_calls=[FunctionCall("delegate", {"prompt": "p"}, namespace="mcp__dsh")],
        items=[search],
    )
    with OpenAIResponsesServer(reply) as srv:
        sent = events(srv, body(user("go")))
    done = [data["item"] for kind, data in sent if kind == "response.output_item.done"]
    assert done[0]["namespace"] == "mcp__dsh"
    assert done[0]["name"] == "delegate"
    assert {k: v for k, v in done[1].items() if k != "id"} == search
