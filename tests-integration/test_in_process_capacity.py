"""Capacity with real in-process children: the cap is never exceeded, a queued run's
progress, the descendants budget as the model reads it, and flat cost: a disposed
delegation leaves nothing for the garbage collector."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import pytest

from dsh.core import (
    AbortSignal,
    Agent,
    Context,
    ModelRequest,
    ScriptedAdapter,
    ScriptedReply,
    ScriptedToolCall,
    parse_preset,
)
from dsh.core.models import BoundModel
from dsh.subagent import (
    SubagentProgress,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subagent._admission import Admission
from dsh.testing.conformance import ConformanceHarness, ProviderConformance
from dsh.testing.fixtures import prompt_behaviour_conformance
from dsh.testing.scripting import prompt_behaviour_model

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PRESET = """
[agent.model]
adapter = "scripted"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-subagent-fork-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent", max_depth = 3 }
"""


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(parse_preset(PRESET)) as ctx:
        yield ctx


def options(delay: float = 0.0, **reply: Any) -> dict[str, Any]:
    return {"model": {"adapter": "scripted", "options": {"replies": [{"delay": delay, **reply}]}}}


async def result_of(run: SubagentRun) -> SubagentResult:
    return await run.result


# -- the cap ------------------------------------------------------------------------------


async def test_the_cap_is_never_exceeded_and_the_queue_is_fifo(ctx: Context) -> None:
    """50 starts, cap 3, spawn children on a slow model: at no point do more than 3
    children exist (sampled at every model call and by a watcher task), and they run
    in the order they were started."""
    runtime = SubagentRuntime.of(ctx)
    runtime.configure(providers={"spawn": 3})
    calls: list[str] = []
    in_model = 0
    peak = {"children": 0, "in_model": 0}

    def children() -> int:
        return sum(1 for agent in ctx.agents.list() if agent.parent_id == parent.id)

    async def slow_model(request: ModelRequest) -> ScriptedReply:
        nonlocal in_model
        in_model += 1
        peak["in_model"] = max(peak["in_model"], in_model)
        peak["children"] = max(peak["children"], children())
        first = next(e for e in request.events if e.type == "user/message")
        calls.append(first.data["content"][0]["text"])
        await anyio.sleep(0.02)
        in_model -= 1
        return ScriptedReply(text="done")

    parent = ctx.agents.create(label="parent", model=BoundModel(ScriptedAdapter(slow_model)))

    async def one(run: SubagentRun) -> None:
        try:
            assert (await run.result).ok
        finally:
            await run.dispose()

    async def watch(stop: anyio.Event) -> None:
        while not stop.is_set():
            peak["children"] = max(peak["children"], children())
            await anyio.sleep(0.001)

    runs = []
    for index in range(50):
        request = SubagentStartRequest(f"task {index}", parent, AbortSignal())
        runs.append(await runtime.start("spawn", request))
        peak["children"] = max(peak["children"], children())
    stop = anyio.Event()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, stop)
            async with anyio.create_task_group() as inner:
                for run in runs:
                    inner.start_soon(one, run)
            stop.set()
    assert peak["children"] == 3, peak
    assert peak["in_model"] == 3, peak
    assert calls == [f"task {index}" for index in range(50)]  # FIFO
    assert runtime.running("spawn") == 0
    assert children() == 0


async def test_a_queued_spawn_run_shows_queued_then_its_own_items(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    runtime.configure(providers={"spawn": 1})
    parent = ctx.agents.create()
    holder = await runtime.start(
        "spawn", SubagentStartRequest("hold", parent, AbortSignal(), agent_options=options(0.2))
    )
    ahead = await runtime.start(
        "spawn", SubagentStartRequest("ahead", parent, AbortSignal(), agent_options=options())
    )
    request = SubagentStartRequest(
        "mine", parent, AbortSignal(), agent_options=options(text="hello there", chunks=2)
    )
    run = await runtime.start("spawn", request)
    assert run.local_agent is None  # queued: no child yet
    items: list[SubagentProgress] = []

    async def collect() -> None:
        async for item in run.progress():
            items.append(item)

    async def dispose_when_settled(other: SubagentRun) -> None:
        await other.result
        await other.dispose()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            tg.start_soon(dispose_when_settled, holder)
            tg.start_soon(dispose_when_settled, ahead)
    result = await run.result
    assert result.output == "hello there"
    assert run.local_agent is not None  # the child, once it started
    kinds = [item.kind for item in items]
    assert kinds[:2] == ["queued", "queued"], kinds
    assert [item.position for item in items[:2]] == [2, 1]
    assert kinds[2] == "notice"  # started (queued -> running)
    assert "text" in kinds[3:]
    assert "usage" in kinds[3:]
    assert "".join(i.text or "" for i in items if i.kind == "text") == "hello there"
    await run.dispose()
    assert runtime.running("spawn") == 0


async def test_a_queued_fork_child_still_gets_its_seed(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    runtime.configure(providers={"fork": 1})
    parent = ctx.agents.create()
    await parent.run("remember the number 41")
    holder = await runtime.start("fork", SubagentStartRequest("hold", parent, AbortSignal()))
    run = await runtime.start("fork", SubagentStartRequest("mine", parent, AbortSignal()))
    await holder.dispose()
    await run.result
    child = run.local_agent
    assert child is not None
    assert child.session.header.meta["seed_length"] > 0
    await run.dispose()


async def test_nested_runs_borrow_their_ancestors_slot(ctx: Context) -> None:
    """With ``spawn`` capped at 1, a child that delegates (and waits) would wait forever
    for the slot it holds itself; its nested runs borrow that slot instead."""
    runtime = SubagentRuntime.of(ctx)
    runtime.configure(max_running=1, providers={"spawn": 1})
    call = ScriptedToolCall(name="subagent", arguments={"description": "d", "prompt": "p"})
    parent = ctx.agents.create(
        model=BoundModel(ScriptedAdapter([ScriptedReply(tool_calls=[call]), ScriptedReply()]))
    )
    with anyio.fail_after(10):
        await parent.run("delegate: each child delegates again, down to max_depth")
    depths = sorted(agent.depth for agent in ctx.agents.list())
    assert depths == [0]  # every child was disposed
    assert len(runtime.usage(parent).runs) == 3  # depths 1, 2 and 3
    assert runtime.running() == 0


# -- the descendants budget, as the model reads it ----------------------------------------


async def test_the_descendants_cap_reaches_the_model_through_the_tool(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    runtime.configure(max_descendants=2)
    call = ScriptedToolCall(name="subagent", arguments={"description": "d", "prompt": "p"})
    parent = ctx.agents.create(
        model=BoundModel(
            ScriptedAdapter(
                [ScriptedReply(tool_calls=[call, call, call]), ScriptedReply(text="ok")]
            )
        )
    )
    await parent.run("fan out")
    results = [e.data for e in parent.session.events if e.type == "tool/result"]
    assert [r["is_error"] for r in results].count(True) == 1
    refused = next(r for r in results if r["is_error"])
    text = refused["content"][0]["text"]
    assert text == (
        "subagent could not start: the delegation tree already has 2 descendants"
        " (max_descendants = 2); finish with what you have, or do the rest of the work"
        " yourself without delegating"
    )
    assert refused["data"] == {"code": "CAPACITY_EXCEEDED"}


# -- flat cost: nothing for the collector ------------------------------------------------


def dsh_garbage(objects: list[Any]) -> list[str]:
    """The dsh objects (and objects of dsh types' modules) among ``objects``."""
    names = []
    for obj in objects:
        module = getattr(type(obj), "__module__", "") or ""
        if module.startswith("dsh."):
            names.append(f"{module}.{type(obj).__qualname__}")
        elif callable(obj) and (getattr(obj, "__module__", "") or "").startswith("dsh."):
            names.append(f"{obj.__module__}.{getattr(obj, '__qualname__', obj)}")
    return names


async def collected_garbage(action: Callable[[], Awaitable[None]], repeat: int) -> list[Any]:
    """Run ``action`` ``repeat`` times with the collector off, then collect: what the
    collector had to free (it would otherwise have died by reference counting)."""
    await action()  # warm up: caches, lazy imports, first-use services
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(repeat):
            await action()
        await asyncio.sleep(0)
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("provider", ["spawn", "fork"])
@pytest.mark.parametrize("watching", ["none", "bus", "subscriber"])
async def test_a_disposed_delegation_leaves_no_garbage(
    ctx: Context, provider: str, watching: str
) -> None:
    runtime = SubagentRuntime.of(ctx)
    parent = ctx.agents.create(model=BoundModel(ScriptedAdapter([ScriptedReply(text="answer")])))
    await parent.run("a completed turn for fork to seed from")
    if watching == "bus":
        ctx.events.on("subagent/progress", lambda event: None)

    async def delegate() -> None:
        run = await runtime.start(provider, SubagentStartRequest("task", parent, AbortSignal()))
        if watching == "subscriber":
            async for _ in run.progress():
                pass
        assert (await run.result).ok
        await run.dispose()

    garbage = await collected_garbage(delegate, 50)
    assert dsh_garbage(garbage) == []
    assert len(garbage) <= 5, garbage[:20]


async def test_cancelled_failed_and_structured_delegations_leave_no_garbage(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    parent = ctx.agents.create()
    slow = options(0.5, text="late")
    failing = options(error="the model is down")

    async def delegate() -> None:
        signal = AbortSignal()
        run = await runtime.start(
            "spawn", SubagentStartRequest("t", parent, signal, agent_options=slow)
        )
        await asyncio.sleep(0)
        signal.abort("stop")
        assert (await run.result).stop_reason == "aborted"
        await run.dispose()
        run = await runtime.start(
            "spawn", SubagentStartRequest("t", parent, AbortSignal(), agent_options=slow)
        )
        await run.dispose()  # disposed mid-turn
        run = await runtime.start(
            "spawn", SubagentStartRequest("t", parent, AbortSignal(), agent_options=failing)
        )
        assert (await run.result).stop_reason == "error"
        await run.dispose()
        run = await runtime.start(
            "spawn",
            SubagentStartRequest("t", parent, AbortSignal(), output_schema={"type": "object"}),
        )
        await run.result
        await run.dispose()

    garbage = await collected_garbage(delegate, 10)
    assert dsh_garbage(garbage) == []


async def test_delegation_through_the_tool_and_queue_leaves_no_garbage(ctx: Context) -> None:
    runtime = SubagentRuntime.of(ctx)
    runtime.configure(providers={"spawn": 1})
    call = ScriptedToolCall(name="subagent", arguments={"description": "d", "prompt": "p"})
    parent: Agent = ctx.agents.create(
        model=BoundModel(
            ScriptedAdapter([ScriptedReply(tool_calls=[call, call]), ScriptedReply(text="ok")])
        ),
        persist=False,
    )

    async def delegate() -> None:
        await parent.run("two at once: one of them waits in the queue")

    garbage = await collected_garbage(delegate, 20)
    assert dsh_garbage(garbage) == []
    results = [e.data for e in parent.session.events if e.type == "tool/result"]
    assert results
    assert not any(r["is_error"] for r in results)


# -- the lifecycle rules hold for queued runs ---------------------------------------------


class TestQueuedSpawnConformance(ProviderConformance):
    """The conformance suite on ``spawn`` capped at one running child, with the slot
    held for 50 ms when each test starts: the run under test is published ``queued``
    and starts when the slot frees up (cancel, dispose, one start/end pair, progress)."""

    @pytest.fixture
    async def harness(self) -> AsyncIterator[ConformanceHarness]:
        async with Context.open(parse_preset(PRESET)) as ctx:
            runtime = SubagentRuntime.of(ctx)
            runtime.configure(providers={"spawn": 1})
            parent = ctx.agents.create(model=prompt_behaviour_model(reply="child says: {prompt}"))
            await parent.run("a completed turn before delegating")
            # Hold the only slot for 50 ms (a run holding it would add its own events).
            gates = runtime._gates_for("spawn")
            Admission.take(gates)

            async def release() -> None:
                await anyio.sleep(0.05)
                runtime._admission.release(gates)

            ctx.spawn(release)
            yield prompt_behaviour_conformance(ctx, "spawn", parent)
