"""The fake Gemini API server: the wire format, rules by content and tool step, checks."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.model_servers import (
    GEMINI_MODEL,
    GeminiCall,
    GeminiReply,
    GeminiServer,
    HTTPError,
    StreamFaults,
    gemini_cli_env,
    parse_sse,
    reply_with_function_response,
)
from dsh.testing.model_servers.gemini import (
    check_gemini_request,
    function_responses,
    tool_step,
    user_text,
)

pytestmark = pytest.mark.timeout(20)

STREAM = f"/v1beta/models/{GEMINI_MODEL}:streamGenerateContent?alt=sse"
WHOLE = f"/v1beta/models/{GEMINI_MODEL}:generateContent"
CONTEXT = {"role": "user", "parts": [{"text": "<session_context>\nlots\n</session_context>"}]}


def prompt(text: str) -> list[dict[str, Any]]:
    """Contents as the Gemini CLI sends a first turn: a context content, then the text."""
    return [CONTEXT, {"role": "user", "parts": [{"text": text}]}]


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"role": "model", "parts": [{"functionCall": {"name": name, "args": args}}]}


def answer(name: str, output: str) -> dict[str, Any]:
    part = {"functionResponse": {"name": name, "response": {"output": output}}}
    return {"role": "user", "parts": [part]}


def chunks(srv: GeminiServer, contents: list[dict[str, Any]]) -> list[Any]:
    status, raw = srv.post_json(STREAM, {"contents": contents})
    assert status == 200, raw
    events = parse_sse(raw)
    assert all(e.event is None for e in events)  # bare data: lines, no names, no [DONE]
    return [e.json() for e in events]


def test_a_text_reply_streams_in_chunks_the_last_one_finishing() -> None:
    with GeminiServer(GeminiReply(text="one two three four")) as srv:
        got = chunks(srv, prompt("hello"))
    assert len(got) == 3
    texts = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in got)
    assert texts == "one two three four"
    assert all(c["candidates"][0]["content"]["role"] == "model" for c in got)
    assert all(c["modelVersion"] == GEMINI_MODEL for c in got)
    assert len({c["responseId"] for c in got}) == 1
    assert "finishReason" not in got[0]["candidates"][0]
    assert "usageMetadata" not in got[0]
    last = got[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    usage = last["usageMetadata"]
    assert usage["candidatesTokenCount"] == 4
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + 4


def test_function_calls_come_whole_after_the_text() -> None:
    reply = GeminiReply(
        text="reading",
        calls=[GeminiCall("read_file", {"file_path": "/w/a"}), GeminiCall("ls", id="c-1")],
        text_chunks=1,
    )
    with GeminiServer(reply) as srv:
        got = chunks(srv, prompt("go"))
    assert [c["candidates"][0]["content"]["parts"] for c in got] == [
        [{"text": "reading"}],
        [
            {"functionCall": {"name": "read_file", "args": {"file_path": "/w/a"}}},
            {"functionCall": {"name": "ls", "args": {}, "id": "c-1"}},
        ],
    ]
    assert got[-1]["candidates"][0]["finishReason"] == "STOP"  # as the real API says


def test_generate_content_answers_one_response_and_stream_without_sse_a_json_array() -> None:
    reply = GeminiReply(text="a b c", calls=[GeminiCall("f", {"x": 1})], usage={
        "promptTokenCount": 7, "candidatesTokenCount": 2})  # fmt: skip
    with GeminiServer(reply, reply) as srv:
        status, raw = srv.post_json(WHOLE, {"contents": prompt("go")})
        assert status == 200
        whole = json.loads(raw)
        status, raw = srv.post_json(STREAM.removesuffix("?alt=sse"), {"contents": prompt("go")})
        assert status == 200
        array = json.loads(raw)
    assert whole["candidates"][0]["content"]["parts"] == [
        {"text": "a b c"},
        {"functionCall": {"name": "f", "args": {"x": 1}}},
    ]
    assert whole["usageMetadata"] == {
        "promptTokenCount": 7,
        "candidatesTokenCount": 2,
        "totalTokenCount": 9,
    }
    assert isinstance(array, list)
    assert len(array) == 4  # three text chunks and the calls


def test_rules_match_user_text_and_pick_replies_by_tool_step() -> None:
    with GeminiServer() as srv:
        srv.when(
            "edit the notes",
            GeminiReply(calls=[GeminiCall("replace", {"file_path": "/w/n"})]),
            reply_with_function_response("Tool {name} said: {output} ({is_error})"),
        )
        first = chunks(srv, prompt("please edit the notes"))
        later = [*prompt("please edit the notes"), call("replace"), answer("replace", "done")]
        second = chunks(srv, later)
        srv.post_json(STREAM, {"contents": later})
        assert len(srv.matching("edit the notes")) == 3
        assert len(srv.generate_requests) == 3
        recorded = srv.requests[1]
    assert first[-1]["candidates"][0]["content"]["parts"][0]["functionCall"]["name"] == "replace"
    text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in second)
    assert text == "Tool replace said: done (False)"
    assert tool_step(recorded) == 1
    assert [(r.name, r.output) for r in function_responses(recorded)] == [("replace", "done")]
    assert "please edit the notes" in user_text(recorded)
    assert "done" not in user_text(recorded)  # function responses are not searched


def test_an_error_response_is_reported_as_an_error() -> None:
    refused = {"functionResponse": {"name": "write_file", "response": {"error": "refused"}}}
    contents = [*prompt("go"), call("write_file"), {"role": "user", "parts": [refused]}]
    with GeminiServer(reply_with_function_response("{output}/{is_error}")) as srv:
        got = chunks(srv, contents)
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in got) == (
        "refused/True"
    )


def test_count_tokens_and_an_unknown_model() -> None:
    with GeminiServer(models=["gemini-x"]) as srv:
        status, raw = srv.post_json("/v1beta/models/gemini-x:countTokens", {"contents": []})
        assert (status, json.loads(raw)) == (200, {"totalTokens": 2})  # words of the body
        status, raw = srv.post_json(STREAM, {"contents": prompt("go")})
        assert status == 404
        assert json.loads(raw)["error"]["status"] == "NOT_FOUND"
        assert srv.generate_requests == []


def test_the_api_key_is_checked_when_set() -> None:
    with GeminiServer("hi", "hi", api_key="k") as srv:
        status, raw = srv.post_json(STREAM, {"contents": prompt("go")})
        assert status == 401
        assert json.loads(raw)["error"] == {
            "code": 401,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "UNAUTHENTICATED",
        }
        status, _ = srv.post_json(STREAM, {"contents": prompt("go")}, headers={
            "x-goog-api-key": "k"})  # fmt: skip
        assert status == 200
        status, _ = srv.post_json(WHOLE + "?key=k", {"contents": prompt("go")})
        assert status == 200


def test_requests_the_real_api_rejects_get_400() -> None:
    assert check_gemini_request({"contents": prompt("go")}) is None
    assert "contents is not specified" in (check_gemini_request({"contents": []}) or "")
    assert "valid role" in (
        check_gemini_request({"contents": [{"role": "x", "parts": [{}]}]}) or ""
    )
    assert "must not be empty" in (check_gemini_request({"contents": [{"parts": []}]}) or "")
    unanswered = [*prompt("go"), call("a"), answer("a", "1"), answer("b", "2")]
    problem = check_gemini_request({"contents": unanswered})
    assert problem is not None
    assert "number of function response parts" in problem
    with GeminiServer("never") as srv:
        status, raw = srv.post_json(STREAM, {"contents": unanswered})
        assert status == 400
        assert json.loads(raw)["error"]["status"] == "INVALID_ARGUMENT"
        assert srv.pending == 1  # the script was not consumed


def test_faults_and_http_errors() -> None:
    with GeminiServer(
        HTTPError(429, "slow down"), GeminiReply(text="a b c", faults=StreamFaults(close_after=1))
    ) as srv:
        status, raw = srv.post_json(STREAM, {"contents": prompt("go")})
        assert status == 429
        assert json.loads(raw)["error"]["status"] == "RESOURCE_EXHAUSTED"
        with pytest.raises(http.client.IncompleteRead) as cut:
            srv.post_json(STREAM, {"contents": prompt("go")})
    (only,) = parse_sse(cut.value.partial)  # cut after the first chunk: no finishing one
    assert "finishReason" not in only.json()["candidates"][0]


def test_gemini_cli_env_keeps_the_cli_at_home_and_on_one_model(tmp_path: Path) -> None:
    env = gemini_cli_env("http://127.0.0.1:9", tmp_path / "g")
    home = tmp_path / "g" / "home"
    assert env["HOME"] == env["GEMINI_CLI_HOME"] == str(home)
    assert env["TMPDIR"] == str(tmp_path / "g" / "tmp")
    assert env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:9"
    assert env["GEMINI_CLI_NO_RELAUNCH"] == "1"
    settings = json.loads((home / ".gemini" / "settings.json").read_text(encoding="utf-8"))
    assert settings["model"]["name"] == GEMINI_MODEL  # what GeminiServer serves by default
    assert settings["privacy"]["usageStatisticsEnabled"] is False
