"""``run.progress()`` and usage of codex runs, with the real codex against the fake server."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentProgress, SubagentRuntime, SubagentStartRequest, SubagentUsage
from dsh.subagent_codex._turn import TurnTracker
from dsh.testing.model_servers.openai_responses import (
    FunctionCall,
    OpenAIResponsesServer,
    ResponsesReply,
    reply_with_tool_output,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PATCH = "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: notes.txt\n+hello\n*** End Patch\nEOF"


@pytest.fixture(autouse=True)
def scripts(responses: OpenAIResponsesServer) -> None:
    """This module's scripts (prompts clear of the standard rules' words)."""
    responses.when(
        "narrate then echo",
        ResponsesReply(
            text="Running echo now.",
            function_calls=[FunctionCall("exec_command", {"cmd": "echo hi"})],
        ),
        reply_with_tool_output("Tool said: {output}"),
    )
    responses.when(
        "patch then break",
        ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": PATCH})]),
        ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": "seq 1 500; exit 3"})]),
        ResponsesReply(text="Done with errors."),
    )
    responses.when(
        "count tokens",
        ResponsesReply(
            text="Counted.",
            usage={
                "input_tokens": 120,
                "output_tokens": 30,
                "cached_tokens": 20,
                "reasoning_tokens": 5,
            },
        ),
    )


async def watch(ctx: Any, parent: Any, prompt: str) -> tuple[Any, list[SubagentProgress]]:
    """Start a codex run, read its whole progress stream, return the result and the items."""
    run = await SubagentRuntime.of(ctx).start(
        "codex", SubagentStartRequest(prompt, parent, AbortSignal())
    )
    items: list[SubagentProgress] = []
    try:
        with anyio.fail_after(30):
            async for item in run.progress():
                items.append(item)
            # the iteration ended because the run settled
            assert run.settled
            result = await run.result
    finally:
        await run.dispose()
    return result, items


def kinds_in_order(items: list[SubagentProgress]) -> list[str]:
    """The item kinds, consecutive repeats folded."""
    return [kind for kind, _ in itertools.groupby(item.kind for item in items)]


async def test_a_tool_round_trip_streams_text_tool_call_tool_update_and_usage(codex: Any) -> None:
    async with codex.context(permission_mode="full-access") as (ctx, parent):
        on_bus: list[Any] = []
        ctx.events.on("subagent/progress", lambda e: on_bus.append(e.data))
        result, items = await watch(ctx, parent, "narrate then echo")
    assert result.stop_reason == "completed", result
    assert result.output.rstrip().endswith("Output:\nhi")
    kinds = kinds_in_order(items)
    first = [kinds.index(kind) for kind in ("text", "tool_call", "tool_update", "usage")]
    assert first == sorted(first), kinds
    assert kinds[-1] == "usage"  # the totals of the last model call come last
    assert all(item.path == () for item in items)
    (call,) = [i for i in items if i.kind == "tool_call"]
    assert call.name == "exec_command"
    assert call.title is not None
    assert "echo hi" in call.title
    assert call.arguments == {"command": call.title}
    (update,) = [i for i in items if i.kind == "tool_update"]
    assert update.tool_call_id == call.tool_call_id
    assert update.status == "completed"
    assert update.text == "hi\n"
    text = "".join(i.text or "" for i in items if i.kind == "text")
    assert text.startswith("Running echo now.")
    assert text.endswith(result.output)
    usage = [i.usage for i in items if i.kind == "usage"]
    assert usage[-1] == result.usage
    assert usage[0] is not None
    assert 0 < usage[0].input_tokens < result.usage.input_tokens  # running totals
    # every item is also on the context's bus, with the run id
    assert [entry["item"] for entry in on_bus] == items
    assert {entry["run_id"] for entry in on_bus} == {result_run_id(on_bus)}


def result_run_id(entries: list[Any]) -> str:
    run_id: str = entries[0]["run_id"]
    assert run_id.startswith("codex-")
    return run_id


async def test_file_changes_and_failed_commands(codex: Any) -> None:
    async with codex.context(permission_mode="full-access") as (ctx, parent):
        result, items = await watch(ctx, parent, "patch then break")
    assert result.stop_reason == "completed", result
    assert (codex.workspace / "notes.txt").read_text() == "hello\n"
    calls = [i for i in items if i.kind == "tool_call"]
    updates = [i for i in items if i.kind == "tool_update"]
    assert [c.name for c in calls] == ["apply_patch", "exec_command"]
    patch, failing = calls
    assert patch.title == str(codex.workspace / "notes.txt")
    assert patch.arguments == {"paths": [patch.title]}
    assert [(u.tool_call_id, u.status) for u in updates] == [
        (patch.tool_call_id, "completed"),
        (failing.tool_call_id, "failed"),  # exit code 3
    ]
    excerpt = updates[1].text
    assert excerpt is not None
    assert len(excerpt) <= 400
    assert excerpt.startswith("1\n2\n3\n")


async def test_reasoning_streams_as_thinking(codex: Any) -> None:
    async with codex.context() as (ctx, parent):
        result, items = await watch(ctx, parent, "think first")
    assert result.output == "Thought it through."
    assert [i.text for i in items if i.kind == "thinking"] == list(codex.thought)
    kinds = kinds_in_order(items)
    assert kinds.index("thinking") < kinds.index("text")


async def test_usage_fields_are_filled(codex: Any) -> None:
    async with codex.context() as (ctx, parent):
        run = await SubagentRuntime.of(ctx).start(
            "codex", SubagentStartRequest("count tokens", parent, AbortSignal())
        )
        async with run:
            with anyio.fail_after(30):
                result = await run.result
    assert result.output == "Counted."
    assert result.usage == SubagentUsage(
        input_tokens=120, output_tokens=30, cached_input_tokens=20, reasoning_tokens=5
    )
    assert result.usage.incomplete is False


async def test_without_a_subscriber_no_progress_is_mapped(
    codex: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mapped: list[str] = []
    real = TurnTracker.progress

    def counting(self: TurnTracker, note: Any) -> SubagentProgress | None:
        mapped.append(note.method)
        return real(self, note)

    monkeypatch.setattr(TurnTracker, "progress", counting)
    async with codex.context(permission_mode="full-access") as (ctx, parent):
        run = await SubagentRuntime.of(ctx).start(
            "codex", SubagentStartRequest("narrate then echo", parent, AbortSignal())
        )
        async with run:
            with anyio.fail_after(30):
                result = await run.result
    assert result.stop_reason == "completed", result
    assert mapped == []
