"""Budgets on in-process children (spawn and fork): a child that never stops calling
tools is stopped at each cap with stop reason ``budget``; a tree budget holds across
nested children; nothing is left running."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from pydantic import BaseModel

from dsh.core import (
    AbortSignal,
    Agent,
    Context,
    ModelRequest,
    ScriptedReply,
    Tool,
    ToolContext,
    Usage,
    parse_preset,
)
from dsh.core.models import BoundModel, ModelDone, ModelStreamEvent, ToolCall
from dsh.subagent import (
    Budget,
    SubagentError,
    SubagentResult,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subagent_in_process_driver import InProcessProvider
from dsh.testing.scripting import call, last_user_text, model

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

PRESET = parse_preset('[agent.model]\nadapter = "scripted"\n')
WORDS = " ".join(["word"] * 100)  # the scripted adapter counts 100 output tokens
PROVIDERS = ["spawn", "fork"]


class NoArgs(BaseModel):
    pass


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(PRESET) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(InProcessProvider("spawn", fork=False))
        runtime.register_provider(InProcessProvider("fork", fork=True))

        async def noop(args: NoArgs, tctx: ToolContext) -> str:
            await anyio.sleep(0.01)
            return "ok"

        ctx.tools.register(Tool.from_model("noop", "does nothing", NoArgs, noop))
        yield ctx
        assert runtime.live_runs() == []


class Counter:
    """A model that never stops calling ``noop`` (100 tokens a call); counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: ModelRequest) -> ScriptedReply:
        self.calls += 1
        return ScriptedReply(text=WORDS, tool_calls=[call("noop")])


async def run_child(ctx: Context, parent: Agent, provider: str, budget: Budget) -> SubagentResult:
    runtime = SubagentRuntime.of(ctx)
    request = SubagentStartRequest("loop forever", parent, AbortSignal(), budget=budget)
    run = await runtime.start(provider, request)
    async with run:
        with anyio.fail_after(10):
            result = await run.result
    child = run.local_agent
    assert child is None or not child.running
    assert runtime.meters.get(run.id) is None  # the meter went with the run
    return result


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_token_budget_stops_a_tool_loop(ctx: Context, provider: str) -> None:
    counter = Counter()
    parent = ctx.agents.create(model=model(counter))
    result = await run_child(ctx, parent, provider, Budget(tokens=500))
    assert result.stop_reason == "budget"
    assert result.diagnostic == "token budget 500 reached: 500 tokens used"
    assert counter.calls <= 5 + 1
    assert result.output == WORDS  # the partial output


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_turn_budget_counts_model_calls(ctx: Context, provider: str) -> None:
    counter = Counter()
    parent = ctx.agents.create(model=model(counter))
    result = await run_child(ctx, parent, provider, Budget(turns=3))
    assert result.stop_reason == "budget"
    assert result.diagnostic == "turn budget 3 reached: 3 model calls made"
    assert counter.calls == 3


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_time_budget_stops_at_the_time_limit(ctx: Context, provider: str) -> None:
    counter = Counter()
    parent = ctx.agents.create(model=model(counter))
    started = anyio.current_time()
    result = await run_child(ctx, parent, provider, Budget(seconds=0.3))
    assert result.stop_reason == "budget"
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("time budget 0.3 s reached: ")
    assert anyio.current_time() - started < 5


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_time_budget_stops_a_child_stuck_in_a_model_call(ctx: Context, provider: str) -> None:
    parent = ctx.agents.create(model=model(lambda request: ScriptedReply(hang=True)))
    result = await run_child(ctx, parent, provider, Budget(seconds=0.2))
    assert result.stop_reason == "budget"
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("time budget 0.2 s reached: ")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_children_budget_refuses_the_next_delegation(ctx: Context, provider: str) -> None:
    await ctx.plugins.load("dsh-tool-subagent", {"provider": "spawn"}, id="subagent")
    started: list[str] = []

    def script(request: ModelRequest) -> ScriptedReply:
        if last_user_text(request) == "grandchild":
            started.append("grandchild")
            return ScriptedReply(text="done")
        return ScriptedReply(
            tool_calls=[call("subagent", description="again", prompt="grandchild")]
        )

    parent = ctx.agents.create(model=model(script))
    result = await run_child(ctx, parent, provider, Budget(children=2))
    assert result.stop_reason == "budget"
    assert result.diagnostic == "children budget 2 reached: 2 delegations started"
    assert len(started) == 2


class PricedAdapter:
    """Never stops calling ``noop``; each call 10 tokens and $0.01 (or no price)."""

    def __init__(self, cost: float | None) -> None:
        self.cost = cost
        self.calls = 0

    def stream(self, request: ModelRequest, signal: AbortSignal) -> AsyncIterator[ModelStreamEvent]:
        self.calls += 1
        return self._events()

    async def _events(self) -> AsyncIterator[ModelStreamEvent]:
        yield ToolCall(f"call-{self.calls}", "noop", {})
        yield ModelDone("tool_calls", Usage(5, 5, cost_usd=self.cost))


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_usd_budget_from_the_reported_cost(ctx: Context, provider: str) -> None:
    adapter = PricedAdapter(0.01)
    parent = ctx.agents.create(model=BoundModel(adapter))  # type: ignore[arg-type]
    result = await run_child(ctx, parent, provider, Budget(usd=0.05))
    assert result.stop_reason == "budget"
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("usd budget $0.05 reached: $0.05")
    assert adapter.calls <= 5 + 1


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_usd_budget_on_an_unpriced_model_fails_loudly(ctx: Context, provider: str) -> None:
    adapter = PricedAdapter(None)
    parent = ctx.agents.create(model=BoundModel(adapter))  # type: ignore[arg-type]
    result = await run_child(ctx, parent, provider, Budget(usd=0.05))
    assert result.stop_reason == "error"
    assert result.diagnostic is not None
    assert "cannot be enforced: the model reported no cost" in result.diagnostic
    assert adapter.calls == 1


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_usd_budget_refused_at_start_for_the_scripted_model(
    ctx: Context, provider: str
) -> None:
    parent = ctx.agents.create(model=model(Counter()))
    runtime = SubagentRuntime.of(ctx)
    request = SubagentStartRequest("x", parent, AbortSignal(), budget=Budget(usd=1))
    with pytest.raises(SubagentError) as info:
        await runtime.start(provider, request)
    assert info.value.code == "INVALID_REQUEST"
    assert "reports no cost" in str(info.value)
    assert runtime.live_runs() == []


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_tool_row_budget_tells_the_parent_model(ctx: Context, provider: str) -> None:
    await ctx.plugins.load(
        "dsh-tool-subagent", {"provider": provider, "budget": {"turns": 2}}, id="subagent"
    )
    child_calls = 0

    def script(request: ModelRequest) -> ScriptedReply:
        nonlocal child_calls
        if last_user_text(request) == "lead":
            if any(e.type == "tool/result" for e in request.events):
                return ScriptedReply(text="lead done")
            return ScriptedReply(tool_calls=[call("subagent", description="d", prompt="loop")])
        child_calls += 1
        return ScriptedReply(text="partial work", tool_calls=[call("noop")])

    lead = ctx.agents.create(model=model(script))
    with anyio.fail_after(10):
        await lead.run("lead")
    results = [e.data for e in lead.session.events if e.type == "tool/result"]
    assert len(results) == 1
    text = results[0]["content"][0]["text"]
    assert results[0]["is_error"] is True
    assert results[0]["data"]["stop_reason"] == "budget"
    assert text.startswith("subagent run ran out of budget before finishing")
    assert "Diagnostic: turn budget 2 reached: 2 model calls made" in text
    assert "Partial output before the run ended: partial work" in text
    assert child_calls == 2


async def test_tree_budget_across_nested_spawn_children(ctx: Context) -> None:
    await ctx.plugins.load("dsh-tool-subagent", {"provider": "spawn"}, id="subagent")
    spent: list[int] = []

    def script(request: ModelRequest) -> ScriptedReply:
        prompt = last_user_text(request)
        spent.append(100)
        if prompt in ("lead", "level1"):
            nxt = "level1" if prompt == "lead" else "level2"
            return ScriptedReply(
                text=WORDS, tool_calls=[call("subagent", description="d", prompt=nxt)]
            )
        return ScriptedReply(text=WORDS, tool_calls=[call("noop")])

    lead = ctx.agents.create(model=model(script))
    runtime = SubagentRuntime.of(ctx)
    lift = runtime.budget_tree(lead, Budget(tokens=1000))
    try:
        with anyio.fail_after(10):
            outcome = await lead.run("lead")
        assert outcome.stop_reason == "aborted"
        meter = runtime.budget_meter(lead)
        assert meter is not None
        assert meter.tripped is not None
        assert meter.tripped[0] == "budget"
        assert meter.tripped[1].startswith("token budget 1000 reached: ")
        assert sum(spent) <= 1000 + 100  # N + one call's worth
        assert meter.tokens == sum(spent)
        assert runtime.live_runs() == []
    finally:
        lift()
    assert runtime.budget_meter(lead) is None


async def test_child_budget_never_exceeds_what_the_parent_has_left(ctx: Context) -> None:
    counter = Counter()
    parent = ctx.agents.create(model=model(counter))
    runtime = SubagentRuntime.of(ctx)
    lift = runtime.budget_tree(parent, Budget(tokens=300, turns=50))
    try:
        result = await run_child(ctx, parent, "spawn", Budget(tokens=5000))
    finally:
        lift()
    assert result.stop_reason == "budget"
    assert result.diagnostic == "token budget 300 reached: 300 tokens used"
    assert counter.calls == 3


async def test_continuable_children_refuse_a_budget(ctx: Context) -> None:
    parent = ctx.agents.create(model=model(Counter()))
    runtime = SubagentRuntime.of(ctx)
    request = SubagentStartRequest("x", parent, AbortSignal(), budget=Budget(tokens=10))
    with pytest.raises(SubagentError) as info:
        await runtime.start_continuable("spawn", request)
    assert "do not take a budget" in str(info.value)
    lift = runtime.budget_tree(parent, Budget(tokens=1000))
    try:
        with pytest.raises(SubagentError) as inherited:
            await runtime.start_continuable(
                "spawn", SubagentStartRequest("x", parent, AbortSignal())
            )
    finally:
        lift()
    assert inherited.value.code == "INVALID_REQUEST"
    assert "this agent's delegation tree has one" in str(inherited.value)
    assert runtime.live_runs() == []
