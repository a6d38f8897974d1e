"""The message fold and progress mapping, fed SDK messages directly (no CLI): what the
fake model server cannot script (thinking, nested Task agents, cache reads)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    StreamEvent,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from dsh.subagent import SubagentProgress, SubagentUsage
from dsh.subagent_claude_code._fold import RunFold


def event(kind: str, agent: str | None = None, **data: Any) -> StreamEvent:
    return StreamEvent("uuid", "session", {"type": kind, **data}, parent_tool_use_id=agent)


def delta(kind: str, agent: str | None = None, **data: Any) -> StreamEvent:
    return event("content_block_delta", agent, index=0, delta={"type": kind, **data})


def result(**fields: Any) -> ResultMessage:
    values: dict[str, Any] = {
        "subtype": "success",
        "duration_ms": 10,
        "duration_api_ms": 5,
        "is_error": False,
        "num_turns": 1,
        "session_id": "session",
        "result": "done",
    }
    return ResultMessage(**{**values, **fields})


def feed(fold: RunFold, *messages: object) -> list[SubagentProgress]:
    items: list[SubagentProgress] = []
    for message in messages:
        fold.feed(message, items.append)
    return items


def test_thinking_and_text_deltas_of_the_child_itself_only() -> None:
    fold = RunFold("claude-code", "dontAsk", None)
    items = feed(
        fold,
        event("message_start", message={"usage": {}}),
        delta("thinking_delta", thinking="Hmm, "),
        delta("thinking_delta", thinking="six times seven."),
        delta("text_delta", text="Forty"),
        delta("text_delta", "toolu_task", text="a nested agent's words"),
        AssistantMessage([ThinkingBlock("Hmm, six times seven.", "sig")], "model"),
        delta("text_delta", text="-two"),
    )
    assert [(i.kind, i.text) for i in items] == [
        ("thinking", "Hmm, "),
        ("thinking", "six times seven."),
        ("text", "Forty"),
        ("text", "-two"),  # no item for the nested agent, none for whole blocks
    ]
    assert fold.partial_output() == "Forty-two"  # what streamed before a stall


def test_tool_calls_of_nested_agents_are_reported_and_outputs_cut_to_an_excerpt() -> None:
    fold = RunFold("claude-code", "dontAsk", None)
    task = ToolUseBlock("toolu_task", "Task", {"description": "look around", "prompt": "..."})
    grep = ToolUseBlock("toolu_grep", "Grep", {"pattern": "TODO"})
    items = feed(
        fold,
        AssistantMessage([TextBlock("Delegating."), task], "model"),
        AssistantMessage([grep], "model", parent_tool_use_id="toolu_task"),
        UserMessage(
            [ToolResultBlock("toolu_grep", [{"type": "text", "text": "x" * 1000}])],
            parent_tool_use_id="toolu_task",
        ),
        UserMessage([ToolResultBlock("toolu_task", "nothing found", is_error=True)]),
    )
    assert [(i.kind, i.tool_call_id, i.name, i.title, i.status) for i in items] == [
        ("tool_call", "toolu_task", "Task", "look around", None),
        ("tool_call", "toolu_grep", "Grep", "Grep", None),
        ("tool_update", "toolu_grep", "Grep", None, "completed"),
        ("tool_update", "toolu_task", "Task", None, "failed"),
    ]
    assert items[1].arguments == {"pattern": "TODO"}
    excerpt = items[2].text
    assert excerpt is not None
    assert len(excerpt) == 400
    assert excerpt.endswith("…")
    assert items[3].text == "nothing found"
    assert fold.last_text == "Delegating."  # the nested agent said nothing of the answer


def test_usage_counts_every_prompt_token_with_cache_reads_as_cached() -> None:
    fold = RunFold("claude-code", "dontAsk", None)
    assert fold.usage() == SubagentUsage.unknown()
    start = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 5,
        "cache_read_input_tokens": 100,
        "output_tokens": 1,
    }
    items = feed(
        fold,
        event("message_start", message={"usage": start}),
        event("message_delta", usage={"output_tokens": 20}),
    )
    assert [i.usage for i in items] == [SubagentUsage(115, 20, cached_input_tokens=100)]
    # cut before a result: what the finished calls used, marked incomplete
    assert fold.usage() == SubagentUsage(115, 20, cached_input_tokens=100, incomplete=True)
    final = {**start, "output_tokens": 20, "output_tokens_details": {"thinking_tokens": 8}}
    (item,) = feed(fold, result(usage=final, total_cost_usd=0.25))
    expected = SubagentUsage(115, 20, 100, reasoning_tokens=8, cost_usd=0.25)
    assert item.usage == expected
    assert fold.usage() == expected
    assert fold.result(None, "exit status 0").usage == expected


def test_nothing_is_mapped_while_nobody_listens() -> None:
    fold = RunFold("claude-code", "dontAsk", None)
    for message in (
        delta("text_delta", text="hello"),
        AssistantMessage([TextBlock("hello"), ToolUseBlock("t1", "Bash", {})], "model"),
        UserMessage([ToolResultBlock("t1", "ok")]),
    ):
        fold.feed(message, None)
    assert fold._tools == {}
    assert fold.last_text == "hello"


def test_importing_the_package_does_not_import_the_sdk() -> None:
    code = (
        "import sys, dsh.subagent_claude_code as p; p.ClaudeCodeProvider();"
        " sys.exit('claude_agent_sdk' in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
