"""The provider kit's parent-side budget: a remote run that reports its usage as it
goes is stopped within one report of its cap and settles ``budget``; what it spent
counts against the parent's tree budget; the budget travels in the lineage."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from dsh.core import AbortSignal, Agent, Context, parse_preset
from dsh.subagent import (
    ALL_START_CAPABILITIES,
    Budget,
    StartFailed,
    SubagentResult,
    SubagentRuntime,
    SubagentStartRequest,
    SubagentUsage,
)
from dsh.subagent.kit import Lineage, RemoteRun, RemoteTimeouts
from dsh.testing.scripted_provider import HANG_PROMPT, ScriptedProvider

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

PRESET = parse_preset('[agent.model]\nadapter = "scripted"\n')


class Spender(RemoteRun):
    """A child that reports 100 more tokens every few milliseconds and never ends
    its turn by itself; a cancel ends it ``aborted``."""

    def __init__(self, request: SubagentStartRequest) -> None:
        super().__init__("spender", request, RemoteTimeouts(cancel_grace=1.0))
        self.reports = 0
        self.cancelled = anyio.Event()

    async def open(self) -> None:
        return None

    async def turn(self) -> SubagentResult:
        while not self.cancelled.is_set():
            self.reports += 1
            self.report_usage(SubagentUsage(90 * self.reports, 10 * self.reports))
            with anyio.move_on_after(0.005):
                await self.cancelled.wait()
        return SubagentResult.aborted(usage=self.usage())

    def usage(self) -> SubagentUsage:
        return SubagentUsage(90 * self.reports, 10 * self.reports)

    async def cancel(self) -> bool:
        self.cancelled.set()
        return True

    async def close(self) -> None:
        return None


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(PRESET) as ctx:
        yield ctx


@pytest.fixture
def parent(ctx: Context) -> Agent:
    return ctx.agents.create(label="parent")


async def test_a_remote_run_stops_within_one_report_of_its_cap(parent: Agent) -> None:
    request = SubagentStartRequest("spend", parent, AbortSignal(), budget=Budget(tokens=500))
    spender = Spender(request)
    run = await spender.launch()
    async with run:
        with anyio.fail_after(10):
            result = await run.result
    assert result.stop_reason == "budget", result
    assert result.diagnostic == "token budget 500 reached: 500 tokens used"
    assert spender.reports == 5  # the fifth report reached the cap; none after it
    assert result.usage.total_tokens == 500


async def test_a_remote_child_spends_against_the_parents_tree(ctx: Context, parent: Agent) -> None:
    runtime = SubagentRuntime.of(ctx)
    lift = runtime.budget_tree(parent, Budget(tokens=1000))
    try:
        meter = runtime.budget_meter(parent)
        assert meter is not None
        request = SubagentStartRequest("spend", parent, AbortSignal(), budget=Budget(tokens=300))
        async with await Spender(request).launch() as run:
            with anyio.fail_after(10):
                result = await run.result
        assert result.stop_reason == "budget"
        assert meter.tokens == 300  # charged to the tree above, as reported
        assert meter.tripped is None  # 300 of 1000: the parent goes on
    finally:
        lift()


async def test_a_run_without_a_budget_is_not_metered(parent: Agent) -> None:
    signal = AbortSignal()
    spender = Spender(SubagentStartRequest("spend", parent, signal))
    async with await spender.launch() as run:
        assert spender.budget is None
        signal.abort("enough")
        with anyio.fail_after(10):
            result = await run.result
    assert result.stop_reason == "aborted"


def test_the_budget_travels_in_the_lineage() -> None:
    lineage = Lineage(2, 5, "s1", None, Budget(tokens=900, seconds=30.5))
    meta = lineage.meta()
    assert meta["budget"] == {"tokens": 900, "seconds": 30.5}
    assert Lineage.from_meta({"dsh": meta}) == lineage
    with pytest.raises(ValueError, match=r"_meta\.dsh\.budget: budget tokens must be"):
        Lineage.from_meta({"dsh": {"depth": 1, "budget": {"tokens": 0}}})
    with pytest.raises(ValueError, match="unknown budget cap 'dollars'"):
        Lineage.from_meta({"dsh": {"depth": 1, "budget": {"dollars": 1}}})


async def test_the_scripted_provider_enforces_the_budget_it_claims(
    ctx: Context, parent: Agent
) -> None:
    provider = ScriptedProvider(
        "scripted-budget", capabilities=ALL_START_CAPABILITIES, usage={"input_tokens": 70}
    )
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(provider)
    held = SubagentStartRequest(HANG_PROMPT, parent, AbortSignal(), budget=Budget(seconds=0.2))
    async with await runtime.start(provider.name, held) as run:
        with anyio.fail_after(10):
            result = await run.result
    assert result.stop_reason == "budget", result
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("time budget 0.2 s reached: ")
    lift = runtime.budget_tree(parent, Budget(tokens=100))
    try:
        answered = SubagentStartRequest("go", parent, AbortSignal())
        async with await runtime.start(provider.name, answered) as run:
            assert (await run.result).stop_reason == "completed"
        meter = runtime.budget_meter(parent)
        assert meter is not None
        assert (meter.tokens, meter.children) == (70, 1)  # its answer's usage counted above
    finally:
        lift()


async def test_a_failed_start_gives_its_children_count_back(ctx: Context, parent: Agent) -> None:
    failing = ScriptedProvider(
        "scripted-failing",
        capabilities=ALL_START_CAPABILITIES,
        start_error=StartFailed("the child could not start"),
    )
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(failing)
    lift = runtime.budget_tree(parent, Budget(children=1))
    try:
        meter = runtime.budget_meter(parent)
        assert meter is not None
        for _ in range(3):  # each failed start is given back: the cap of 1 never bites
            with pytest.raises(StartFailed):
                await runtime.start(failing.name, SubagentStartRequest("go", parent, AbortSignal()))
            assert meter.children == 0
        assert meter.tripped is None
    finally:
        lift()


def test_whole_caps_from_a2a_metadata_arrive_as_floats() -> None:
    found = Lineage.from_meta({"dsh": {"depth": 1.0, "budget": {"tokens": 900.0, "usd": 0.5}}})
    assert found is not None
    assert found.budget == Budget(tokens=900, usd=0.5)
