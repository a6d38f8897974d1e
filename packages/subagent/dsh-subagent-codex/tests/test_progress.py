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
