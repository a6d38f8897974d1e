"""Session events -> chat messages, tool definitions, options, and the stream assembler."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.core import Usage
from dsh.core.models import ModelDone, ModelError, TextDelta, ToolCall, ToolSpec
from dsh.core.sessions import Event
from dsh.llm_openai import Config, OpenAIOptions, chat_messages, resolve_options, tool_definitions
from dsh.llm_openai.messages import INTERRUPTED_RESULT
from dsh.llm_openai.stream import ChunkAssembler, SSELines
from dsh.testing.model_servers import check_request


def log(*items: tuple[str, dict[str, Any]]) -> list[Event]:
    return [Event(seq, kind, data, 0.0) for seq, (kind, data) in enumerate(items)]


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def call(call_id: str, name: str = "lookup", **arguments: Any) -> tuple[str, dict[str, Any]]:
    return ("tool/call", {"id": call_id, "name": name, "arguments": arguments})


def result(call_id: str, value: str, *, is_error: bool = False) -> tuple[str, dict[str, Any]]:
    data = {"call_id": call_id, "name": "lookup", "content": text(value), "is_error": is_error}
    return ("tool/result", data)


def assistant(value: str = "") -> tuple[str, dict[str, Any]]:
    return ("assistant/message", {"content": text(value) if value else [], "stop_reason": "end"})


def user(value: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("user/message", {"content": text(value), **extra})


def valid(messages: list[dict[str, Any]]) -> bool:
    return check_request({"model": "m", "messages": messages}) is None


def test_a_tool_round_trip() -> None:
    events = log(
        user("what is dsh?"),
        ("turn/start", {"turn": 1}),
        assistant("Let me look."),
        call("c1", word="dsh"),
        call("c2", word="seam"),
        result("c1", "a shell"),
        result("c2", "no such word", is_error=True),
        assistant("dsh is a shell."),
        ("turn/end", {"turn": 1, "stop_reason": "completed"}),
    )
    messages = chat_messages("Be brief.", events)
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "what is dsh?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"word": "dsh"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"word": "seam"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a shell"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: no such word"},
        {"role": "assistant", "content": "dsh is a shell."},
    ]
    assert valid(messages)


def test_no_system_prompt_and_string_content() -> None:
    messages = chat_messages("", log(("user/message", {"content": "plain"})))
    assert messages == [{"role": "user", "content": "plain"}]


def test_consecutive_user_messages_merge_and_non_text_blocks_are_skipped() -> None:
    events = log(
        user("first"),
        (
            "user/message",
            {"content": [{"type": "image", "url": "x"}, *text("second")], "kind": "inject"},
        ),
        user("a notice", kind="notice"),
    )
    assert chat_messages("", events) == [{"role": "user", "content": "first\n\nsecond\n\na notice"}]


def test_a_cancelled_turn_leaves_calls_without_results() -> None:
    events = log(
        user("go"), assistant(), call("c1"), call("c2"), result("c1", "done"), user("again")
    )
    messages = chat_messages("", events)
    assert messages[-3:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "tool", "tool_call_id": "c2", "content": INTERRUPTED_RESULT},
        {"role": "user", "content": "again"},
    ]
    assert messages[1]["content"] == ""
    assert valid(messages)


def test_results_that_answer_no_call_are_dropped() -> None:
    events = log(user("go"), result("ghost", "boo"), assistant("hi"), result("ghost", "boo"))
    messages = chat_messages("", events)
    assert messages == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "hi"},
    ]
    assert valid(messages)


def test_calls_without_an_assistant_message_still_form_one() -> None:
    messages = chat_messages("", log(user("go"), call("c1", x=1), result("c1", "r")))
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'
    assert valid(messages)


def test_tool_definitions() -> None:
    spec = ToolSpec("noargs", "Does a thing.", {})
    assert tool_definitions([spec]) == [
        {
            "type": "function",
            "function": {
                "name": "noargs",
                "description": "Does a thing.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]


def test_options_defaults_validation_and_merging() -> None:
    options = OpenAIOptions()
    assert options.url == "https://api.deepseek.com/chat/completions"
    assert (options.api_key_env, options.model) == ("DEEPSEEK_API_KEY", "deepseek-chat")
    assert OpenAIOptions(base_url="http://h/v1/").url == "http://h/v1/chat/completions"
    with pytest.raises(ValueError, match="base_url must start with http"):
        OpenAIOptions(base_url="ftp://x")
    with pytest.raises(ValueError, match="extra_body may not set messages, stream"):
        OpenAIOptions(extra_body={"stream": False, "messages": []})
    defaults = Config(
        base_url="http://h/v1", extra_body={"temperature": 0}, adapter="local"
    ).model_dump(exclude={"adapter"}, exclude_unset=True)
    merged = resolve_options(defaults, {"extra_body": {"max_tokens": 9}, "read_timeout": 3})
    assert merged.base_url == "http://h/v1"
    assert merged.extra_body == {"temperature": 0, "max_tokens": 9}
    assert merged.read_timeout == 3
    with pytest.raises(ValueError, match="invalid openai model options: read_timeout"):
        resolve_options({}, {"read_timeout": -1})
    with pytest.raises(ValueError, match="invalid openai model options: bogus"):
        resolve_options({}, {"bogus": 1})


def test_sse_lines() -> None:
    sse = SSELines()
    assert sse.feed(": keep-alive") is None
    assert sse.feed("event: ignored") is None
    assert sse.feed("data: {") is None
    assert sse.feed('data:"a": 1}') is None
    assert sse.feed("") == '{\n"a": 1}'
    assert sse.feed("") is None
    assert sse.feed("data: [DONE]") is None
    assert sse.flush() == "[DONE]"


STREAM = (
    ": keep-alive\r\n"
    'data: {"a": "line\u2028sep"}\r\n\r\n'  # a raw U+2028 inside data is not a line end
    "data: one\rdata: two\r\r"  # CR alone ends lines too
    "event: x\ndata: [DONE]"  # the last line has no line end: flush() takes it
)
STREAM_EVENTS = ['{"a": "line\u2028sep"}', "one\ntwo", "[DONE]"]


def events_of(pieces: list[str]) -> list[str]:
    sse = SSELines()
    events = [data for piece in pieces for data in sse.feed_text(piece)]
    rest = sse.flush()
    return events + ([rest] if rest is not None else [])


def test_sse_text_whole_and_in_pieces() -> None:
    assert events_of([STREAM]) == STREAM_EVENTS
    for cut in range(1, len(STREAM)):  # every split in two, a CRLF split included
        assert events_of([STREAM[:cut], STREAM[cut:]]) == STREAM_EVENTS, cut
    assert events_of(list(STREAM)) == STREAM_EVENTS  # one character at a time


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    import json

    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return json.dumps({"choices": [choice], **extra})


def test_assembler_handles_servers_that_omit_the_call_index() -> None:
    assembler = ChunkAssembler()
    for data in (
        chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x":'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": "1}"}}]}),
        chunk({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": {"y": 2}}}]}),
        chunk({}, "tool_calls", usage={"prompt_tokens": 1, "completion_tokens": 2}),
        "[DONE]",
    ):
        assert assembler.feed(data) == []
    assert assembler.finish() == [
        ToolCall("a", "f", {"x": 1}),
        ToolCall("b", "g", {"y": 2}),
        ModelDone("tool_calls", Usage(1, 2)),
    ]


def test_assembler_stop_with_calls_refusals_and_failures() -> None:
    assembler = ChunkAssembler()
    assembler.feed(chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}))
    assembler.feed(chunk({}, "stop"))
    assert assembler.finish()[-1] == ModelDone("tool_calls", None)

    refused = ChunkAssembler()
    assert refused.feed(chunk({"refusal": "I can't help with that."}, "stop")) == [
        TextDelta("I can't help with that.")
    ]
    assert refused.finish() == [ModelDone("refusal", None)]

    starved = ChunkAssembler()
    starved.feed(chunk({"content": "par"}, "insufficient_system_resource"))
    with pytest.raises(ModelError, match="could not finish the response"):
        starved.finish()

    nameless = ChunkAssembler()
    nameless.feed(chunk({"tool_calls": [{"index": 0, "id": "a"}]}, "tool_calls"))
    with pytest.raises(ModelError, match="tool call without a name"):
        nameless.finish()

    with pytest.raises(ModelError, match="not a JSON object"):
        ChunkAssembler().feed("[1]")
    with pytest.raises(ModelError, match="'choices' is not a list"):
        ChunkAssembler().feed('{"choices": 3}')
