"""Strict NDJSON framing: bounded lines, and every frame classified per JSON-RPC 2.0.

(Moved from dsh-acp with the framing itself.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    LineReader,
    OversizedLine,
    classify,
    error_response,
    excerpt,
)

pytestmark = pytest.mark.timeout(60)


def read_all(data: bytes, max_bytes: int = 64, chunk: int = 7) -> list[bytes | OversizedLine]:
    async def go() -> list[bytes | OversizedLine]:
        reader = asyncio.StreamReader()
        for index in range(0, len(data), chunk):
            reader.feed_data(data[index : index + chunk])
        reader.feed_eof()
        lines = LineReader(reader, max_bytes)
        out: list[bytes | OversizedLine] = []
        while (line := await lines.next()) is not None:
            out.append(line)
        return out

    return asyncio.run(go())


def test_lines_split_on_newlines_and_the_last_one_needs_none() -> None:
    assert read_all(b'{"a":1}\n{"b":2}\n\nlast') == [b'{"a":1}', b'{"b":2}', b"", b"last"]


def test_a_line_over_the_cap_is_reported_not_kept() -> None:
    lines = read_all(b"x" * 500 + b"\nok\n" + b"y" * 300, max_bytes=64)
    assert isinstance(lines[0], OversizedLine)
    assert lines[0].size == 500
    assert lines[1] == b"ok"
    assert isinstance(lines[2], OversizedLine)  # over the cap at EOF too
    assert lines[2].size == 300


@pytest.mark.parametrize(
    ("line", "kind", "code"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}', "request", None),
        (b'{"jsonrpc":"2.0","method":"session/cancel","params":{}}', "notification", None),
        (b'{"jsonrpc":"2.0","id":"a","result":null}', "response", None),
        (b'{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}', "response", None),
        (b'{"jsonrpc":"2.0","id":1,"error":"boom"}', "error", None),  # no reply to a reply
        (b"[]", "error", INVALID_REQUEST),
        (b"[{}]", "error", INVALID_REQUEST),
        (b"5", "error", INVALID_REQUEST),
        (b'"x"', "error", INVALID_REQUEST),
        (b"true", "error", INVALID_REQUEST),
        (b"null", "error", INVALID_REQUEST),
        (b"{nope", "error", PARSE_ERROR),
        (b'{"id":1}', "error", INVALID_REQUEST),
        (b'{"id":true,"method":"x"}', "error", INVALID_REQUEST),
        (b'{"id":1,"method":""}', "error", INVALID_REQUEST),
        (b'{"id":1,"method":"x","params":3}', "error", INVALID_REQUEST),
    ],
)
def test_classify(line: bytes, kind: str, code: int | None) -> None:
    frame = classify(line)
    assert frame is not None
    assert frame.kind == kind
    if code is None:
        assert frame.reply is None
    else:
        assert frame.reply is not None
        assert frame.reply["error"]["code"] == code
        assert frame.reply["jsonrpc"] == "2.0"


def test_an_invalid_request_with_a_valid_id_is_answered_with_that_id() -> None:
    frame = classify(b'{"id":9,"method":5}')
    assert frame is not None
    assert frame.reply == error_response(9, INVALID_REQUEST, frame.reply["error"]["message"])


def test_blank_lines_are_skipped_and_oversized_lines_answered() -> None:
    assert classify(b"   ") is None
    frame = classify(OversizedLine(10_000))
    assert frame is not None
    assert frame.reply is not None
    assert "10000 bytes" in frame.reply["error"]["message"]


def test_excerpts_are_short_and_printable() -> None:
    text = excerpt(b"\x00\x01" + b"a" * 500)
    assert len(text) <= 161
    assert text.endswith("…")
    assert "\x00" not in text


JSON: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=200), JSON.map(lambda v: json.dumps(v).encode())))
def test_any_line_is_classified_and_a_request_always_gets_an_answer_shape(line: bytes) -> None:
    """No line makes classify raise; whatever is not a well-formed message gets a reply
    (except a malformed *response*, which has nobody to answer)."""
    frame = classify(line)
    if frame is None:
        assert not line.strip()
        return
    if frame.kind == "error" and frame.reply is None:
        assert frame.message is not None
        assert "method" not in frame.message
    if frame.reply is not None:
        reply = frame.reply
        json.dumps(reply)  # serializable
        assert set(reply) == {"jsonrpc", "id", "error"}
        assert reply["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST)


@pytest.mark.parametrize(
    ("line", "reply_id"),
    [
        (b'{"jsonrpc":"1.0","id":5,"method":"initialize","params":{}}', 5),
        (b'{"id":"a","method":"initialize"}', "a"),
        (b'{"jsonrpc":2,"method":"session/cancel"}', None),
        (b'{"jsonrpc":"1.0","id":3,"result":{}}', None),  # a response: nobody to answer by id
    ],
)
def test_a_server_requires_jsonrpc_2_0(line: bytes, reply_id: Any) -> None:
    frame = classify(line, require_version=True)
    assert frame is not None
    assert frame.kind == "error"
    assert frame.reply is not None
    assert frame.reply["id"] == reply_id
    assert frame.reply["error"]["code"] == INVALID_REQUEST
    assert "jsonrpc" in frame.reply["error"]["message"]
    lenient = classify(line)  # a client reads leniently (codex sends no jsonrpc at all)
    assert lenient is not None
    assert lenient.kind != "error"


def test_lone_surrogates_are_replaced_in_content_and_kept_in_the_id() -> None:
    from dsh.jsonrpc import scrub_surrogates

    frame = classify(
        b'{"jsonrpc":"2.0","id":"\\udc00","method":"m\\ud800",'
        b'"params":{"k\\udfff":["hi \\ud83d","\\ud83d\\ude00 whole"]}}'
    )
    assert frame is not None
    assert frame.kind == "request"
    assert frame.message == {
        "jsonrpc": "2.0",
        "id": "\udc00",
        "method": "m\ufffd",
        "params": {"k\ufffd": ["hi \ufffd", "\U0001f600 whole"]},
    }
    assert scrub_surrogates({"a": ["\ud800", 1, None]}) == {"a": ["\ufffd", 1, None]}


def test_encode_message_escapes_lone_surrogates_only_when_it_must() -> None:
    from dsh.jsonrpc import encode_message

    line = encode_message({"id": "\ud800", "text": "é"})
    assert line.endswith(b"\n")
    assert line.decode("utf-8")  # valid UTF-8
    assert json.loads(line) == {"id": "\ud800", "text": "é"}
    assert encode_message({"text": "é"}) == '{"text":"é"}\n'.encode()  # compact, not escaped
