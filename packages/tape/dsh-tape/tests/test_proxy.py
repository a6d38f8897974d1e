"""The recording proxy against dsh-testing's fake model servers: record, then replay
with the server closed; streaming passes through as it arrives; divergence; no secret
on the tape; a clean close."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from dsh.tape import Divergence, TapeError, TapeProxy, read_tape
from dsh.testing.model_servers import (
    AnthropicMessagesServer,
    ChatReply,
    ChatToolCall,
    FakeServer,
    MessagesReply,
    OpenAIChatServer,
    OpenAIResponsesServer,
    ResponsesReply,
    StreamFaults,
)

pytestmark = pytest.mark.timeout(30)

KEY = "sk-test-secret-key-0123456789abcdef"


def chat(text: str, *, system: str = "You are terse.", stream: bool = True) -> dict[str, Any]:
    return {
        "model": "gpt-test",
        "stream": stream,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": text}],
    }


def post(base: str, path: str, body: Any, **headers: str) -> httpx.Response:
    with httpx.Client(timeout=10) as client:
        return client.post(base + path, json=body, headers=headers)


def _record_and_replay(
    tmp_path: Path, server: FakeServer, base: str, path: str, bodies: list[Any], **headers: str
) -> None:
    """Record ``bodies`` through the proxy to the started ``server``, close it, replay."""
    recorded: list[tuple[int, str, bytes]] = []
    try:
        with TapeProxy(tmp_path, "record", {"api": base}) as proxy:
            for body in bodies:
                r = post(proxy.base_url("api"), path, body, **headers)
                recorded.append((r.status_code, r.headers["content-type"], r.content))
    finally:
        server.close()
    assert proxy.recorded == len(bodies)
    assert all(status == 200 for status, _, _ in recorded), recorded
    # The server is closed now: replay needs no upstream, no key.
    with TapeProxy(tmp_path, "replay") as proxy:
        replayed = []
        for body in bodies:
            r = post(proxy.base_url("api"), path, body)
            replayed.append((r.status_code, r.headers["content-type"], r.content))
    assert replayed == recorded
    assert proxy.divergence is None
    assert proxy.remaining == 0


def test_openai_chat_streaming_and_whole_replay_byte_identical(tmp_path: Path) -> None:
    server = OpenAIChatServer(
        ChatReply(text="hello there"),
        ChatReply(tool_calls=[ChatToolCall("read_file", {"path": "a.txt"})]),
        ChatReply(text="whole answer"),
        api_key=KEY,
    )
    bodies = [chat("hi"), chat("read a.txt"), chat("no stream", stream=False)]
    server.start()
    base = server.api_base
    _record_and_replay(
        tmp_path, server, base, "/chat/completions", bodies, authorization=f"Bearer {KEY}"
    )
    tape = read_tape(tmp_path)
    assert [e["content_type"].split(";")[0] for e in tape.exchanges] == [
        "text/event-stream",
        "text/event-stream",
        "application/json",
    ]
    assert tape.exchanges[0]["body"].rstrip().endswith("data: [DONE]")


def test_openai_responses_record_and_replay(tmp_path: Path) -> None:
    server = OpenAIResponsesServer(ResponsesReply(text="from responses"))
    server.start()
    body = {"model": "gpt-test", "instructions": "Be brief.", "input": "hi", "stream": True}
    _record_and_replay(tmp_path, server, server.api_base, "/responses", [body])


def test_anthropic_messages_record_and_replay(tmp_path: Path) -> None:
    server = AnthropicMessagesServer(MessagesReply(text="from claude"), api_key=KEY)
    server.start()
    body = {
        "model": "claude-test",
        "max_tokens": 100,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"user_id": "user_abc_session_1"},
        "stream": True,
    }
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    _record_and_replay(tmp_path, server, server.api_base, "/v1/messages", [body], **headers)
    # A volatile field (Claude Code's per-session metadata.user_id) does not count.
    with TapeProxy(tmp_path, "replay") as proxy:
        changed = {**body, "metadata": {"user_id": "user_abc_session_2"}}
        assert post(proxy.base_url("api"), "/v1/messages", changed).status_code == 200


def test_the_stream_reaches_the_client_as_it_arrives(tmp_path: Path) -> None:
    reply = ChatReply(text="one two three four", text_chunks=4, faults=StreamFaults(delay=0.2))
    with (
        OpenAIChatServer(reply) as server,
        TapeProxy(tmp_path, "record", {"openai": server.api_base}) as proxy,
    ):
        url = proxy.base_url("openai") + "/chat/completions"
        with httpx.Client(timeout=10) as client, client.stream("POST", url, json=chat("hi")) as r:
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data:"))
            # The first event is here while the server is still sending the rest.
            assert not server.requests[0].finished
            rest = [line for line in lines if line.startswith("data:")]
    assert "chat.completion.chunk" in first
    assert rest[-1] == "data: [DONE]"
    assert read_tape(tmp_path).exchanges[0]["body"].count("data:") == len(rest) + 1


def test_identical_requests_are_answered_in_recorded_order(tmp_path: Path) -> None:
    with (
        OpenAIChatServer("first", "second", "third") as server,
        TapeProxy(tmp_path, "record", {"openai": server.api_base}) as proxy,
    ):
        recorded = [
            post(proxy.base_url("openai"), "/chat/completions", chat("same", stream=False)).json()
            for _ in range(3)
        ]
    with TapeProxy(tmp_path, "replay") as proxy:
        replayed = [
            post(proxy.base_url("openai"), "/chat/completions", chat("same", stream=False)).json()
            for _ in range(3)
        ]
        extra = post(proxy.base_url("openai"), "/chat/completions", chat("same", stream=False))
    texts = [r["choices"][0]["message"]["content"] for r in replayed]
    assert texts == ["first", "second", "third"]
    assert replayed == recorded
    assert extra.status_code == 409  # a fourth identical call is not on the tape
    assert proxy.divergence is not None
    assert proxy.divergence.closest_seq is None


def test_a_changed_request_is_a_divergence_with_a_diff(tmp_path: Path) -> None:
    with (
        OpenAIChatServer("one", "two") as server,
        TapeProxy(tmp_path, "record", {"openai": server.api_base}) as proxy,
    ):
        post(proxy.base_url("openai"), "/chat/completions", chat("first task"))
        post(proxy.base_url("openai"), "/chat/completions", chat("other task", system="Other."))
    with TapeProxy(tmp_path, "replay") as proxy:
        r = post(proxy.base_url("openai"), "/chat/completions", chat("first tusk"))
        again = post(proxy.base_url("openai"), "/chat/completions", chat("first task"))
    assert r.status_code == 409
    error = r.json()["error"]
    assert error["type"] == "tape_divergence"
    assert again.status_code == 200  # the tape is still there for the right request
    found = proxy.divergence
    assert isinstance(found, Divergence)
    assert (found.label, found.path, found.call) == ("openai", "/chat/completions", 0)
    assert found.closest_seq == 1  # the most alike, though its conversation key differs
    assert '-   "content": "first task"' in found.diff
    assert '+   "content": "first tusk"' in found.diff
    assert len(found.diff.splitlines()) <= 40
    assert found.diff in error["message"]


def test_no_secret_reaches_the_tape(tmp_path: Path) -> None:
    body = chat(f"my key is {KEY}")
    body["api_key"] = "plain-secret-value"
    with (
        OpenAIChatServer("ok", api_key=KEY) as server,
        TapeProxy(tmp_path, "record", {"openai": server.api_base}) as proxy,
    ):
        r = post(
            proxy.base_url("openai"),
            "/chat/completions?api-key=query-secret&api-version=1",
            body,
            authorization=f"Bearer {KEY}",
        )
        assert r.status_code == 200
        assert server.requests[0].header("authorization") == f"Bearer {KEY}"  # forwarded
    text = (tmp_path / "tape.jsonl").read_text()
    for secret in (KEY, "plain-secret-value", "query-secret", "Bearer"):
        assert secret not in text
    entry = read_tape(tmp_path).exchanges[0]
    assert entry["path"] == "/chat/completions?api-key=[REDACTED]&api-version=1"
    assert "authorization" not in json.dumps(entry).lower()


def test_the_proxy_closes_cleanly_with_a_connection_open(tmp_path: Path) -> None:
    before = {t.ident for t in threading.enumerate()}
    from dsh.testing.model_servers import Hang

    with OpenAIChatServer(Hang()) as server:
        proxy = TapeProxy(tmp_path, "record", {"openai": server.api_base}).start()
        failure: list[BaseException] = []

        def call() -> None:
            try:
                post(proxy.base_url("openai"), "/chat/completions", chat("hang"))
            except httpx.HTTPError as exc:
                failure.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        server.wait_for_requests(1)
        proxy.close()
        caller.join(10)
        assert not caller.is_alive()
        assert failure  # the open call ended when the proxy closed
    assert {t.ident for t in threading.enumerate()} <= before
    assert read_tape(tmp_path).exchanges == []  # an unanswered call is not recorded


def test_replay_without_a_tape_is_a_tape_error(tmp_path: Path) -> None:
    with pytest.raises(TapeError, match="cannot read the tape"):
        TapeProxy(tmp_path / "none", "replay").start()


def test_an_unknown_label_and_a_path_outside_the_prefix_are_answered_404(tmp_path: Path) -> None:
    with TapeProxy(tmp_path, "record", {}) as proxy:
        assert post(proxy.base_url("nope"), "/x", {}).status_code == 404
        assert post(f"http://127.0.0.1:{proxy.port}", "/v1/x", {}).status_code == 404


def test_volatile_fields_are_left_out_of_the_comparison() -> None:
    from dsh.tape._format import canonical

    request = {
        "model": "m",
        "prompt_cache_key": "a",
        "client_metadata": {"session_id": "s"},
        "metadata": {"user_id": "u", "keep": 1},
        "input": [{"id": "msg_1", "role": "user", "content": "hi"}, "text"],
    }
    assert canonical(request) == {
        "model": "m",
        "metadata": {"keep": 1},
        "input": [{"role": "user", "content": "hi"}, "text"],
    }
    assert request["input"][0]["id"] == "msg_1"  # the recorded request is left whole
    assert request["metadata"] == {"user_id": "u", "keep": 1}
    assert "prompt_cache_key" in request
    plain = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert canonical(plain) == plain


@pytest.mark.parametrize(
    "secret",
    [
        "sk-ant-0123456789abcdefghij",
        "pk-0123456789abcdefghij",
        "BeArEr abcdefgh12345",
        "bearer\tabcdefgh12345",
        "AIza" + "x" * 35,
        "ghp_" + "a" * 36,
    ],
)
def test_key_looking_texts_are_redacted_wherever_they_are(secret: str) -> None:
    from dsh.tape._format import redact_text, redact_value

    text = "s" * 3000 + f" here: {secret} and more"
    assert redact_text(text) == "s" * 3000 + " here: [REDACTED] and more"
    assert redact_value({"messages": [{"content": text}]}) == {
        "messages": [{"content": "s" * 3000 + " here: [REDACTED] and more"}]
    }
    assert redact_text("s" * 3000) == "s" * 3000


def test_a_tape_line_of_the_wrong_shape_is_answered_500_and_kept(tmp_path: Path) -> None:
    request = chat("hi", stream=False)
    line = {"v": 1, "seq": 1, "label": "openai", "method": "POST", "path": "/chat/completions"}
    (tmp_path / "tape.jsonl").write_text(
        json.dumps({"tape": 1}) + "\n" + json.dumps({**line, "request": request}) + "\n"
    )
    with TapeProxy(tmp_path, "replay") as proxy:
        r = post(proxy.base_url("openai"), "/chat/completions", request)
    assert r.status_code == 500
    assert "KeyError" in r.json()["error"]["message"]
    assert [type(e) for e in proxy.errors] == [KeyError]


def test_a_tool_line_is_redacted_whenever_redaction_would_change_it() -> None:
    from dsh.tape._format import _KEY_NAME_PIECES, _KEY_NAMES, _TOKEN_NAMES, needs_redaction
    from dsh.tape._tools import tool_line, tool_line_text

    # the fast path's pieces cover every key-like member name
    assert all(any(p in n for p in _KEY_NAME_PIECES) or n in _TOKEN_NAMES for n in _KEY_NAMES)
    clean = {"conversation": "c", "call": 1, "name": "read_file", "arguments": {"path": "a"}}
    clean["result"] = {"content": [{"type": "text", "text": "alpha"}], "data": {"input_tokens": 3}}
    assert not needs_redaction(json.dumps(tool_line(1, 2, clean, redact=False)))
    assert json.loads(tool_line_text(1, 2, clean)) == tool_line(1, 2, clean)
    for arguments, result in (
        ({"Api-Key": "v1"}, {}),
        ({"path": "a"}, {"data": {"Refresh-Token": "v2"}}),
        ({"path": "a"}, {"data": {"client_secret": "v3", "password": "v4"}}),
        ({"cmd": f"curl -H 'Authorization: Bearer {KEY}'"}, {}),
    ):
        call = {**clean, "arguments": arguments, "result": result}
        text = tool_line_text(1, 2, call)
        assert json.loads(text) == tool_line(1, 2, call)
        for secret in ("v1", "v2", "v3", "v4", KEY):
            assert f'"{secret}"' not in text
            assert KEY not in text
