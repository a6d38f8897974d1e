"""Giving up waiting never changes a child's outcome; only the signal and dispose() do.
And the smaller reliability rules of the runtime around in-process children."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Agent, BusEvent, Context, parse_preset
from dsh.subagent import (
    SubagentResult,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subagent_in_process_driver import InProcessProvider
from dsh.testing.scripted_provider import ScriptedProvider

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

SLOW_CHILD = {
    "model": {"adapter": "scripted", "options": {"replies": [{"text": "done", "delay": 0.3}]}}
}


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(InProcessProvider("spawn", fork=False))
        runtime.register_provider(InProcessProvider("fork", fork=True))
        yield ctx


def request(parent: Agent, **fields: Any) -> SubagentStartRequest:
    fields.setdefault("agent_options", SLOW_CHILD)
    return SubagentStartRequest("work", parent, AbortSignal(), **fields)


@pytest.mark.parametrize("provider", ["spawn", "fork"])
@pytest.mark.parametrize("waiter", ["asyncio.timeout", "anyio.move_on_after", "task.cancel"])
async def test_a_waiter_giving_up_does_not_kill_the_child(
    ctx: Context, provider: str, waiter: str
) -> None:
    parent = ctx.agents.create()
    run = await ctx.subagents.start(provider, request(parent))
    async with run:
        if waiter == "asyncio.timeout":
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await run.result
        elif waiter == "anyio.move_on_after":
            with anyio.move_on_after(0.05):
                await run.result
        else:
            task = asyncio.ensure_future(asyncio.shield(asyncio.ensure_future(_wait(run))))
            await asyncio.sleep(0.05)
            task.cancel()
        assert not run.settled
        with anyio.fail_after(5):
            result = await run.result
    assert result.stop_reason == "completed", result
    assert result.output == "done"


async def _wait(run: Any) -> SubagentResult:
    result: SubagentResult = await run.result
    return result


async def test_a_child_under_a_depth_limit_may_use_a_provider_managed_provider(
    ctx: Context,
) -> None:
    """The inherited limit binds only providers with depth_limit: the others manage
    depth themselves (a numeric max_depth for them is refused by the gate anyway)."""
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(ScriptedProvider("external", reply="from outside"))
    parent = ctx.agents.create()
    at_limit = parent.ctx.agents.create(parent=parent, meta={"delegation_depth": 3, "max_depth": 3})
    with pytest.raises(Exception, match="subagent depth 4 exceeds max_depth 3"):
        await runtime.start("spawn", request(at_limit))
    run = await runtime.start("external", SubagentStartRequest("hi", at_limit, AbortSignal()))
    async with run:
        assert (await run.result).output == "from outside"


async def test_an_infrastructure_failure_end_event_is_capped_and_redacted(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    secret = "sk-" + "a" * 40
    runtime.register_provider(
        ScriptedProvider("broken", result_error=RuntimeError(f"boom token={secret} " + "x" * 9000))
    )
    ends: list[BusEvent] = []
    ctx.events.on("subagent/end", ends.append)
    parent = ctx.agents.create()
    run = await runtime.start("broken", SubagentStartRequest("hi", parent, AbortSignal()))
    async with run:
        with pytest.raises(RuntimeError):
            await run.result
    (end,) = ends
    diagnostic = end.data["diagnostic"]
    assert end.data["stop_reason"] == "error"
    assert secret not in diagnostic
    assert len(diagnostic.encode()) <= 4096
    assert diagnostic.endswith("[diagnostic truncated]")


def test_a_lone_surrogate_in_a_diagnostic_is_replaced() -> None:
    result = SubagentResult("", "error", diagnostic="bad \ud800 text")
    assert result.diagnostic == "bad \ufffd text"
    result.diagnostic.encode("utf-8")  # no UnicodeEncodeError


async def test_continuable_turns_emit_the_shared_start_and_end_pair(ctx: Context) -> None:
    events: list[BusEvent] = []
    ctx.events.on("subagent/start", events.append)
    ctx.events.on("subagent/end", events.append)
    parent = ctx.agents.create()
    child = await ctx.subagents.start_continuable(
        "spawn", SubagentStartRequest("first", parent, AbortSignal(), label="helper")
    )
    with anyio.fail_after(5):
        while len(events) < 2:
            await anyio.sleep(0.01)
    await ctx.subagents.continuable.send_message(parent, child.id, "second")
    with anyio.fail_after(5):
        while len(events) < 4:
            await anyio.sleep(0.01)
    assert [e.type for e in events] == ["subagent/start", "subagent/end"] * 2
    assert {e.data["run_id"] for e in events} == {child.id}
    assert [e.data["turn"] for e in events] == [1, 1, 2, 2]
    assert all(e.scope == parent.id for e in events)
    assert events[1].data["stop_reason"] == "completed"
