"""``run.progress()`` for in-process children: the child's text, tool calls, tool results
and usage, in order; nested runs with their path; the bus; the usage ledger."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from dsh.core import AbortSignal, BusEvent, Context, parse_preset
from dsh.subagent import SubagentProgress, SubagentRuntime, SubagentStartRequest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

PRESET = """
[agent.model]
adapter = "scripted"

[[plugin]]
name = "dsh-testing-example"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-subagent-fork-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent", max_depth = 2 }
"""

TOOL_CHILD = {
    "model": {
        "adapter": "scripted",
        "options": {
            "replies": [
                {
                    "text": "Let me echo.",
                    "tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}],
                },
                {"text": "The tool said: {tool_results}", "chunks": 3, "delay": 0.05},
            ]
        },
    }
}

NESTING_CHILD = {
    "model": {
        "adapter": "scripted",
        "options": {
            "replies": [
                {
                    "tool_calls": [
                        {"name": "subagent", "arguments": {"description": "inner", "prompt": "go"}}
                    ],
                    "delay": 0.05,
                },
                {"text": "outer done"},
            ]
        },
    }
}


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(parse_preset(PRESET)) as ctx:
        yield ctx


@pytest.mark.parametrize("provider", ["spawn", "fork"])
async def test_a_tool_round_trip_streams_text_tool_call_tool_update_and_usage(
    ctx: Context, provider: str
) -> None:
    parent = ctx.agents.create()
    request = SubagentStartRequest("go", parent, AbortSignal(), agent_options=TOOL_CHILD)
    run = await ctx.subagents.start(provider, request)
    items: list[SubagentProgress] = []
    async with run:
        with anyio.fail_after(10):
            async for item in run.progress():  # ends when the run settles
                items.append(item)
        result = await run.result
    kinds = [item.kind for item in items]
    first = {kind: kinds.index(kind) for kind in ("text", "tool_call", "tool_update", "usage")}
    assert first["text"] < first["tool_call"] < first["tool_update"], kinds
    assert "usage" in kinds
    call = items[first["tool_call"]]
    assert (call.name, call.arguments) == ("echo", {"text": "hi"})
    update = items[first["tool_update"]]
    assert (update.status, update.text, update.tool_call_id) == (
        "completed",
        "echo: hi",
        call.tool_call_id,
    )
    texts = "".join(i.text or "" for i in items if i.kind == "text")
    assert texts.endswith("The tool said: echo: hi")
    assert all(item.path == () for item in items)
    assert result.output == "The tool said: echo: hi"
    assert items[-1].kind == "usage"
    assert items[-1].usage == result.usage


async def test_nested_runs_show_with_their_path(ctx: Context) -> None:
    parent = ctx.agents.create()
    request = SubagentStartRequest("go", parent, AbortSignal(), agent_options=NESTING_CHILD)
    run = await ctx.subagents.start("spawn", request)
    items: list[SubagentProgress] = []
    async with run:
        with anyio.fail_after(10):
            async for item in run.progress():
                items.append(item)
    nested = [i for i in items if i.path]
    starts = [i for i in nested if i.kind == "child_start"]
    assert len(starts) == 1
    grandchild = starts[0].run_id
    assert grandchild is not None
    assert starts[0].path == (grandchild,)
    assert starts[0].label == "inner"
    assert starts[0].provider == "spawn"
    ends = [i for i in nested if i.kind == "child_end"]
    assert [(e.path, e.stop_reason) for e in ends] == [((grandchild,), "completed")]
    assert any(i.kind == "text" and i.path == (grandchild,) for i in nested)
    assert nested.index(starts[0]) < nested.index(ends[0])


async def test_every_item_is_on_the_bus_with_its_run(ctx: Context) -> None:
    seen: list[BusEvent] = []
    ctx.events.on("subagent/progress", seen.append)
    parent = ctx.agents.create()
    request = SubagentStartRequest("go", parent, AbortSignal(), agent_options=TOOL_CHILD)
    run = await ctx.subagents.start("spawn", request)
    async with run:
        await run.result
    assert seen, "no progress on the bus"
    assert {e.data["run_id"] for e in seen} == {run.id}
    assert all(e.scope == parent.id for e in seen)
    kinds = [e.data["item"].kind for e in seen]
    assert {"text", "tool_call", "tool_update", "usage"} <= set(kinds)


async def test_a_subscriber_that_never_reads_does_not_slow_the_child(ctx: Context) -> None:
    parent = ctx.agents.create()
    request = SubagentStartRequest("go", parent, AbortSignal(), agent_options=TOOL_CHILD)
    run = await ctx.subagents.start("spawn", request)
    stream = run.progress(buffer=2)
    async with run:
        with anyio.fail_after(5):
            result = await run.result
    assert result.stop_reason == "completed"
    assert stream.dropped > 0
    kept = [item async for item in stream]
    assert len(kept) == 2  # the newest two
    assert kept[-1].kind == "usage"


async def test_the_usage_ledger_covers_the_whole_tree(ctx: Context) -> None:
    parent = ctx.agents.create()
    request = SubagentStartRequest("go", parent, AbortSignal(), agent_options=NESTING_CHILD)
    run = await ctx.subagents.start("spawn", request)
    async with run:
        outer = await run.result
    report = SubagentRuntime.of(ctx).usage(parent)
    assert run.id in report.runs
    assert len(report.runs) == 2  # the child and the grandchild it started
    inner = next(u for r, u in report.runs.items() if r != run.id)
    assert report.total.output_tokens == outer.usage.output_tokens + inner.output_tokens
    assert not report.incomplete
    child = next(a for a in [run.local_agent] if a is not None)
    below_child = SubagentRuntime.of(ctx).usage(child)
    assert list(below_child.runs) == [r for r in report.runs if r != run.id]
