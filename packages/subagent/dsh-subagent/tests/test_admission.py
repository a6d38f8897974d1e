"""Admission control with the real runtime and scripted children: caps per provider
and per context, the FIFO queue, queued runs (abort, dispose, progress, start
failures, context close), the descendants budget, the plugin's config."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Agent, BusEvent, Context, parse_preset
from dsh.core.plugins import PluginError
from dsh.subagent import (
    CapacityExceeded,
    RunHandle,
    StartFailed,
    SubagentCapabilities,
    SubagentProgress,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subagent._admission import QueuedHandle
from dsh.subagent._runtime import EVENT_END, EVENT_PROGRESS, EVENT_START
from dsh.subagent.kit import Lineage, process_max_running
from dsh.testing.scripted_provider import HANG_PROMPT, ScriptedProvider

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        yield ctx


@pytest.fixture
def parent(ctx: Context) -> Agent:
    return ctx.agents.create(label="parent")


def request(parent: Agent, prompt: str = HANG_PROMPT, **fields: object) -> SubagentStartRequest:
    return SubagentStartRequest(prompt, parent, AbortSignal(), **fields)  # type: ignore[arg-type]


class CountingProvider(ScriptedProvider):
    """A scripted provider that counts ``start`` calls and records their prompts."""

    def __init__(self, name: str = "s", **kwargs: object) -> None:
        super().__init__(name, **kwargs)  # type: ignore[arg-type]
        self.calls = 0
        self.prompts: list[str] = []
        self.fail_labels: set[str] = set()

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        self.calls += 1
        self.prompts.append(request.label or request.prompt_text)
        if request.label in self.fail_labels:
            raise StartFailed("the agent command was not found")
        return await super().start(request)


def setup(ctx: Context, cap: int = 1, **kwargs: Any) -> tuple[SubagentRuntime, CountingProvider]:
    runtime = SubagentRuntime.of(ctx)
    provider = CountingProvider("s", **kwargs)
    runtime.register_provider(provider)
    runtime.configure(providers={provider.name: cap})
    return runtime, provider


def queued(run: SubagentRun) -> bool:
    return isinstance(run._handle, QueuedHandle) and run._handle.state == "queued"


async def until(condition: object, what: str, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not condition():  # type: ignore[operator]
            await anyio.sleep(0.001)


async def test_with_room_start_takes_the_fast_path(ctx: Context, parent: Agent) -> None:
    runtime, provider = setup(ctx, cap=2)
    first = await runtime.start("s", request(parent, label="a"))
    second = await runtime.start("s", request(parent, label="b"))
    third = await runtime.start("s", request(parent, label="c"))
    assert type(first._handle) is RunHandle  # the provider's own run: no wrapper
    assert type(second._handle) is RunHandle
    assert queued(third)
    assert provider.calls == 2
    assert runtime.running("s") == 2
    assert [run.id for run in runtime.queued()] == [third.id]
    for run in (first, second, third):
        await run.dispose()
    assert runtime.running("s") == 0


async def test_no_cap_means_no_bookkeeping(ctx: Context, parent: Agent) -> None:
    runtime = SubagentRuntime.of(ctx)
    provider = CountingProvider()
    runtime.register_provider(provider)
    runs = [await runtime.start("s", request(parent)) for _ in range(20)]
    assert provider.calls == 20
    assert runtime.running("s") == 0  # uncapped runs hold no slot
    assert all(type(run._handle) is RunHandle for run in runs)
    for run in runs:
        await run.dispose()


async def test_queue_order_is_fifo_and_positions_move(ctx: Context, parent: Agent) -> None:
    runtime, provider = setup(ctx, cap=1)
    runs = [await runtime.start("s", request(parent, label=f"r{i}")) for i in range(6)]
    assert provider.prompts == ["r0"]
    assert [run._handle.position for run in runs[1:]] == [1, 2, 3, 4, 5]  # type: ignore[attr-defined]
    for index in range(5):
        await runs[index].dispose()  # frees the slot: the oldest queued run starts
        await until(lambda i=index: provider.calls == i + 2, "the next start")
        assert provider.prompts == [f"r{i}" for i in range(index + 2)]
        waiting = runs[index + 2 :]
        assert [run._handle.position for run in waiting] == list(  # type: ignore[attr-defined]
            range(1, len(waiting) + 1)
        )
    await runs[5].dispose()
    assert provider.prompts == [f"r{i}" for i in range(6)]


async def test_the_cap_counts_a_run_until_its_dispose_has_finished(
    ctx: Context, parent: Agent
) -> None:
    gate = anyio.Event()
    runtime, provider = setup(ctx, cap=1, gate=gate)
    first = await runtime.start("s", request(parent, "x", label="first"))
    second = await runtime.start("s", request(parent, "x", label="second"))
    gate.set()
    assert (await first.result).ok  # settled, not yet disposed: still holds the slot
    await anyio.sleep(0.05)
    assert provider.calls == 1
    assert queued(second)
    await first.dispose()
    assert (await second.result).ok
    assert provider.prompts == ["first", "second"]
    await second.dispose()


async def test_abort_while_queued_settles_aborted_and_starts_nothing(
    ctx: Context, parent: Agent
) -> None:
    ends: list[BusEvent] = []
    ctx.events.on(EVENT_END, ends.append)
    runtime, provider = setup(ctx, cap=1)
    holder = await runtime.start("s", request(parent, label="holder"))
    waiting = request(parent, label="waiting")
    run = await runtime.start("s", waiting)
    assert queued(run)
    waiting.signal.abort("the user pressed escape")
    with anyio.fail_after(1):
        result = await run.result
    assert result.stop_reason == "aborted"
    assert "cancelled while queued: the user pressed escape" in (result.diagnostic or "")
    assert runtime.queued() == []
    await holder.dispose()  # frees the slot: nothing is waiting for it any more
    await anyio.sleep(0.05)
    assert provider.calls == 1  # the aborted run's provider.start never ran
    await run.dispose()
    assert [e.data["run_id"] for e in ends].count(run.id) == 1


async def test_dispose_of_a_queued_run(ctx: Context, parent: Agent) -> None:
    runtime, provider = setup(ctx, cap=1)
    holder = await runtime.start("s", request(parent))
    run = await runtime.start("s", request(parent))
    later = await runtime.start("s", request(parent, label="later"))
    assert later._handle.position == 2  # type: ignore[attr-defined]
    await run.dispose()
    assert run.disposed
    assert run.settled
    assert (await run.result).stop_reason == "aborted"
    assert later._handle.position == 1  # type: ignore[attr-defined]
    assert run not in runtime.live_runs()
    await holder.dispose()
    await until(lambda: provider.calls == 2, "the next start")
    assert provider.prompts[-1] == "later"  # the disposed run was skipped
    await later.dispose()


async def test_a_queued_run_forwards_the_inner_run(ctx: Context, parent: Agent) -> None:
    events: list[BusEvent] = []
    for kind in (EVENT_START, EVENT_END, EVENT_PROGRESS):
        ctx.events.on(kind, events.append)
    gate = anyio.Event()
    runtime, provider = setup(ctx, cap=1, gate=gate, usage={"input_tokens": 4})
    holder = await runtime.start("s", request(parent, "x"))
    run = await runtime.start("s", request(parent, "x", label="queued one"))
    mine = [e for e in events if e.data.get("run_id") == run.id]
    assert [e.type for e in mine] == [EVENT_START, EVENT_PROGRESS]
    assert mine[0].data["state"] == "queued"
    assert mine[1].data["item"] == SubagentProgress("queued", position=1)
    await holder.dispose()
    gate.set()
    result = await run.result
    assert result.ok
    assert result.output == "scripted reply"
    assert result.usage.input_tokens == 4
    mine = [e for e in events if e.data.get("run_id") == run.id]
    assert [e.type for e in mine] == [EVENT_START, EVENT_PROGRESS, EVENT_PROGRESS, EVENT_END]
    assert mine[2].data["item"].kind == "notice"  # state queued -> running
    assert runtime.usage(parent).runs[run.id].input_tokens == 4
    assert runtime.running("s") == 1  # the inner run holds the slot until disposed
    await run.dispose()
    assert provider.disposals == 2
    assert runtime.running("s") == 0


async def test_a_start_that_fails_after_queueing_settles_error_and_frees_the_slot(
    ctx: Context, parent: Agent
) -> None:
    runtime, provider = setup(ctx, cap=1)
    holder = await runtime.start("s", request(parent))
    run = await runtime.start("s", request(parent, label="broken"))
    after = await runtime.start("s", request(parent, label="after"))
    provider.fail_labels.add("broken")
    await holder.dispose()
    result = await run.result
    assert result.stop_reason == "error"
    assert result.diagnostic == "subagent could not start: the agent command was not found"
    await until(lambda: provider.prompts[-1:] == ["after"], "the next start")
    assert not after.settled
    await run.dispose()
    await after.dispose()


async def test_abort_while_starting_reaches_the_provider(ctx: Context, parent: Agent) -> None:
    starting = anyio.Event()

    class SlowStart(CountingProvider):
        async def start(self, request: SubagentStartRequest) -> SubagentRun:
            if request.label == "slow":
                starting.set()
                with anyio.move_on_after(5):
                    await request.signal.wait()
            return await super().start(request)  # raises StartAborted once aborted

    runtime = SubagentRuntime.of(ctx)
    provider = SlowStart()
    runtime.register_provider(provider)
    runtime.configure(providers={"s": 1})
    holder = await runtime.start("s", request(parent, label="holder"))
    slow = request(parent, label="slow")
    run = await runtime.start("s", slow)
    await holder.dispose()
    await starting.wait()
    slow.signal.abort("changed my mind")
    with anyio.fail_after(2):
        result = await run.result
    assert result.stop_reason == "aborted"
    assert "changed my mind" in (result.diagnostic or "")
    await run.dispose()
    assert runtime.running("s") == 0


async def test_dispose_while_starting_waits_for_the_start(ctx: Context, parent: Agent) -> None:
    starting = anyio.Event()

    class Blocking(CountingProvider):
        async def start(self, request: SubagentStartRequest) -> SubagentRun:
            if request.label == "slow":
                starting.set()
                with anyio.move_on_after(5):
                    await request.signal.wait()
            return await super().start(request)

    runtime = SubagentRuntime.of(ctx)
    provider = Blocking()
    runtime.register_provider(provider)
    runtime.configure(providers={"s": 1})
    holder = await runtime.start("s", request(parent, label="holder"))
    run = await runtime.start("s", request(parent, label="slow"))
    await holder.dispose()
    await starting.wait()
    with anyio.fail_after(2):
        await run.dispose()  # aborts the start through the run's own signal
    result = await run.result
    assert result.stop_reason == "aborted"
    assert runtime.running("s") == 0


async def test_context_close_with_a_queue() -> None:
    provider = CountingProvider()
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(provider)
        runtime.configure(providers={"s": 1})
        parent = ctx.agents.create()
        runs = [await runtime.start("s", request(parent, label=f"r{i}")) for i in range(4)]
        assert [queued(run) for run in runs] == [False, True, True, True]
    results = [run.result.peek() for run in runs]
    assert all(r is not None and r.stop_reason == "aborted" for r in results)
    assert all(run.disposed for run in runs)
    assert provider.prompts == ["r0"]  # closing never admits a queued run
    assert provider.live == 0


async def test_the_context_cap_spans_providers(ctx: Context, parent: Agent) -> None:
    runtime = SubagentRuntime.of(ctx)
    a, b = CountingProvider("a"), CountingProvider("b")
    runtime.register_provider(a)
    runtime.register_provider(b)
    runtime.configure(max_running=2)
    ra = await runtime.start("a", request(parent))
    rb = await runtime.start("b", request(parent))
    rc = await runtime.start("b", request(parent))
    assert queued(rc)
    assert runtime.running() == 2
    await ra.dispose()
    await until(lambda: b.calls == 2, "b's second start")
    for run in (rb, rc):
        await run.dispose()


async def test_a_full_provider_does_not_hold_up_another(ctx: Context, parent: Agent) -> None:
    runtime = SubagentRuntime.of(ctx)
    a, b = CountingProvider("a"), CountingProvider("b")
    runtime.register_provider(a)
    runtime.register_provider(b)
    runtime.configure(providers={"a": 1, "b": 1})
    runs = [
        await runtime.start("a", request(parent)),
        await runtime.start("a", request(parent)),
        await runtime.start("b", request(parent)),
    ]
    assert [queued(run) for run in runs] == [False, True, False]
    for run in runs:
        await run.dispose()


async def test_provider_default_and_config_override(ctx: Context, parent: Agent) -> None:
    runtime = SubagentRuntime.of(ctx)
    declared = CountingProvider("proc")
    declared.max_running = 1  # type: ignore[attr-defined]
    runtime.register_provider(declared)
    assert runtime.cap_of("proc") == 1
    one = await runtime.start("proc", request(parent))
    two = await runtime.start("proc", request(parent))
    assert queued(two)
    restore = runtime.configure(providers={"proc": None})  # "unlimited" in a preset
    assert runtime.cap_of("proc") is None
    await until(lambda: declared.calls == 2, "the queued run admitted by the new cap")
    restore()
    assert runtime.cap_of("proc") == 1
    for run in (one, two):
        await run.dispose()
    assert process_max_running() >= 1


async def test_progress_of_a_queued_run_shows_its_position(ctx: Context, parent: Agent) -> None:
    runtime, _ = setup(ctx, cap=1)
    holder = await runtime.start("s", request(parent))
    ahead = await runtime.start("s", request(parent))
    run = await runtime.start("s", request(parent))
    items: list[SubagentProgress] = []

    async def watch() -> None:
        async for item in run.progress():
            items.append(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await until(lambda: len(items) == 1, "the first item")
        assert items == [SubagentProgress("queued", position=2)]
        await ahead.dispose()
        await until(lambda: len(items) == 2, "the new position")
        assert items[1] == SubagentProgress("queued", position=1)
        await holder.dispose()
        await until(lambda: len(items) == 3, "the start notice")
        assert items[2].kind == "notice"
        await run.dispose()
    assert [item.kind for item in items] == ["queued", "queued", "notice"]


async def test_descendants_cap_refuses_with_a_message_for_the_model(
    ctx: Context, parent: Agent
) -> None:
    runtime = SubagentRuntime.of(ctx)
    provider = CountingProvider(capabilities=SubagentCapabilities(depth_limit=True))
    runtime.register_provider(provider)
    runtime.configure(max_descendants=3)
    child = ctx.agents.create(parent=parent)
    grandchild = ctx.agents.create(parent=child)
    runs = [
        await runtime.start("s", request(parent, "x")),
        await runtime.start("s", request(child, "x")),
        await runtime.start("s", request(grandchild, "x")),
    ]
    assert runtime.descendants(grandchild) == (3, 3)
    with pytest.raises(CapacityExceeded) as info:
        await runtime.start("s", request(child, "x"))
    assert info.value.code == "CAPACITY_EXCEEDED"
    assert str(info.value) == (
        "the delegation tree already has 3 descendants (max_descendants = 3); finish with"
        " what you have, or do the rest of the work yourself without delegating"
    )
    assert provider.calls == 3
    other_root = ctx.agents.create()  # another tree has its own budget
    extra = await runtime.start("s", request(other_root, "x"))
    for run in (*runs, extra):
        await run.dispose()


async def test_a_start_that_raises_does_not_use_the_budget(ctx: Context, parent: Agent) -> None:
    runtime = SubagentRuntime.of(ctx)
    provider = CountingProvider(start_error=StartFailed("no"))
    runtime.register_provider(provider)
    runtime.configure(max_descendants=1)
    for _ in range(3):
        with pytest.raises(StartFailed):
            await runtime.start("s", request(parent, "x"))
    assert runtime.descendants(parent) == (0, 1)


async def test_the_budget_goes_to_a_child_process_and_back(ctx: Context, parent: Agent) -> None:
    runtime = SubagentRuntime.of(ctx)
    runtime.configure(max_descendants=10)
    seen: list[Lineage] = []

    class Remote(CountingProvider):
        async def start(self, request: SubagentStartRequest) -> SubagentRun:
            seen.append(Lineage.of_request(request))  # what a process provider sends
            return await super().start(request)

    runtime.register_provider(Remote("remote"))
    run = await runtime.start("remote", request(parent, "x"))
    lineage = seen[0]
    assert lineage.max_descendants == 9  # the child itself is counted
    assert lineage.meta()["maxDescendants"] == 9
    assert lineage.env()["DSH_MAX_DESCENDANTS"] == "9"
    assert Lineage.from_meta({"dsh": lineage.meta()}) == lineage
    assert Lineage.from_env(lineage.env()) == lineage
    # the child process's root agent carries the budget in its session meta
    remote_root = ctx.agents.create(meta=lineage.session_meta())
    assert runtime.descendants(remote_root) == (0, 9)
    await run.dispose()


async def test_plugin_config_sets_the_caps() -> None:
    preset = parse_preset(
        '[agent.model]\nadapter = "scripted"\n'
        '[[plugin]]\nname = "dsh-subagent"\n'
        "config.max_running = 5\n"
        'config.providers = { s = 2, t = "unlimited" }\n'
        "config.max_descendants = 9\n"
    )
    async with Context.open(preset) as ctx:
        runtime = SubagentRuntime.of(ctx)
        declared = CountingProvider("t")
        declared.max_running = 1  # type: ignore[attr-defined]
        runtime.register_provider(declared)
        assert runtime.cap_of("s") == 2
        assert runtime.cap_of("t") is None
        assert runtime.descendants(ctx.agents.create()) == (0, 9)
    bad = parse_preset(
        '[agent.model]\nadapter = "scripted"\n'
        '[[plugin]]\nname = "dsh-subagent"\nconfig = { max_running = 0 }\n'
    )
    with pytest.raises(PluginError, match="dsh-subagent"):
        async with Context.open(bad):
            pass
