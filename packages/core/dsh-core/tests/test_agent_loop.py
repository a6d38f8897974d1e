"""The agent loop with the scripted model: tools, concurrency, cancellation, messages."""

from __future__ import annotations

import asyncio

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel

from dsh.core import (
    Agent,
    Context,
    ScriptedAdapter,
    ScriptedReply,
    ScriptedToolCall,
    Tool,
    ToolContext,
    ToolResult,
    last_output,
    parse_preset,
    tool,
)
from dsh.core._llm import BoundModel, ModelRequest
from dsh.core.agents import TurnBlocked
from dsh.core.models import ModelConfig
from dsh.testing.fixtures import ONE_TOOL_CALL_TURN

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]

PRESET = parse_preset('[agent.model]\nadapter = "scripted"\n')


def scripted(*replies: ScriptedReply) -> BoundModel:
    return BoundModel(ScriptedAdapter(list(replies)))


def call(name: str, **arguments: object) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=dict(arguments))


class Numbers(BaseModel):
    a: int
    b: int


@tool("add", "Add two integers")
async def add(args: Numbers, tctx: ToolContext) -> str:
    return str(args.a + args.b)


def types(agent: Agent) -> list[str]:
    return [e.type for e in agent.session.events]


def adder(ctx: Context) -> Agent:
    """An agent whose model calls ``add(2, 40)`` once, then answers with the result."""
    ctx.tools.register(add)
    return ctx.agents.create(
        model=scripted(
            ScriptedReply(tool_calls=[call("add", a=2, b=40)]),
            ScriptedReply(text="the answer is {tool_results}"),
        )
    )


async def test_tool_call_round_trip() -> None:
    async with Context.open(PRESET) as ctx:
        agent = adder(ctx)
        outcome = await agent.run("add them")
        assert outcome.stop_reason == "completed"
        assert types(agent) == list(ONE_TOOL_CALL_TURN)
        result = agent.session.events[4].data
        assert result["call_id"] == agent.session.events[3].data["id"]
        assert result["content"] == [{"type": "text", "text": "42"}]
        assert last_output(agent.session.events) == "the answer is 42"


async def test_model_sees_tool_specs_and_invalid_arguments_come_back_as_errors() -> None:
    seen: list[ModelRequest] = []

    def script(request: ModelRequest) -> ScriptedReply:
        seen.append(request)
        if len(seen) == 1:
            return ScriptedReply(tool_calls=[call("add", a="x", b=1)])
        return ScriptedReply(text="ok")

    async with Context.open(PRESET) as ctx:
        ctx.tools.register(add)
        agent = ctx.agents.create(model=BoundModel(ScriptedAdapter(script)))
        await agent.run("go")
        spec = seen[0].tools[0]
        assert spec.name == "add"
        assert spec.parameters["required"] == ["a", "b"]
        assert seen[0].system.startswith("You are a helpful")
        error = agent.session.events[4].data
        assert error["is_error"] is True
        assert "invalid arguments for tool add: a:" in error["content"][0]["text"]


async def test_safe_tool_calls_run_concurrently_and_unsafe_ones_alone() -> None:
    active = 0
    peak = 0
    order: list[str] = []

    async def run(args: Numbers, tctx: ToolContext) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        order.append(f"start {args.a}")
        await anyio.sleep(0.05)
        order.append(f"end {args.a}")
        active -= 1
        return "ok"

    async with Context.open(PRESET) as ctx:
        ctx.tools.register(Tool.from_model("slow", "slow", Numbers, run))
        ctx.tools.register(Tool.from_model("write", "w", Numbers, run, concurrency_safe=False))
        agent = ctx.agents.create(
            model=scripted(
                ScriptedReply(
                    tool_calls=[call("slow", a=i, b=0) for i in range(5)]
                    + [call("write", a=9, b=0)]
                ),
                ScriptedReply(text="done"),
            )
        )
        started = anyio.current_time()
        await agent.run("go")
        elapsed = anyio.current_time() - started
    assert peak == 5
    assert elapsed < 0.25  # 5 concurrent (~0.05) + 1 alone (~0.05), not 6 x 0.05
    assert order[-2:] == ["start 9", "end 9"]  # the unsafe call ran after the batch, alone
    results = [e for e in agent.session.events if e.type == "tool/result"]
    assert [r.data["call_id"] for r in results] == [
        e.data["id"] for e in agent.session.events if e.type == "tool/call"
    ]


async def test_cancel_mid_step_settles_aborted_and_leaves_no_task() -> None:
    entered = anyio.Event()
    cancelled = anyio.Event()
    tool_signal_reasons: list[str] = []

    async def block(args: Numbers, tctx: ToolContext) -> str:
        tctx.signal.on_abort(tool_signal_reasons.append)
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "unreachable"

    async with Context.open(PRESET) as ctx:
        ctx.tools.register(Tool.from_model("block", "b", Numbers, block))
        ctx.tools.register(Tool.from_model("block2", "b", Numbers, block))
        agent = ctx.agents.create(
            model=scripted(
                ScriptedReply(tool_calls=[call("block", a=1, b=1), call("block2", a=1, b=1)])
            )
        )
        tasks_before = len(asyncio.all_tasks())
        agent.followup("go")
        await entered.wait()
        agent.cancel("user pressed stop")
        with anyio.fail_after(2):
            await agent.when_idle()
        assert cancelled.is_set()
        end = agent.session.events[-1]
        assert end.type == "turn/end"
        assert end.data["stop_reason"] == "aborted"
        assert end.data["error"] == "user pressed stop"
        assert tool_signal_reasons == ["user pressed stop", "user pressed stop"]
        assert not agent.running
        await anyio.lowlevel.checkpoint()
        assert len(asyncio.all_tasks()) <= tasks_before


async def test_cancel_while_the_model_hangs() -> None:
    async with Context.open(PRESET) as ctx:
        agent = ctx.agents.create(model=scripted(ScriptedReply(hang=True)))
        agent.followup("go")
        await anyio.sleep(0.01)
        agent.cancel()
        with anyio.fail_after(2):
            await agent.when_idle()
        assert agent.session.events[-1].data["stop_reason"] == "aborted"


async def test_cancel_before_the_turn_started_still_records_an_aborted_turn() -> None:
    async with Context.open(PRESET) as ctx:
        agent = ctx.agents.create()
        agent.followup("go")
        agent.cancel("too late")
        await agent.when_idle()
        assert types(agent) == ["user/message", "turn/start", "turn/end"]
        assert agent.session.events[-1].data == {
            "turn": 1,
            "stop_reason": "aborted",
            "error": "too late",
        }


async def test_stop_reasons_from_the_model_and_tools() -> None:
    async def blocked(args: Numbers, tctx: ToolContext) -> str:
        raise TurnBlocked("needs approval to write /etc/hosts")

    async def broken(args: Numbers, tctx: ToolContext) -> str:
        raise RuntimeError("disk on fire")

    async with Context.open(PRESET) as ctx:
        ctx.tools.register(Tool.from_model("blocked", "b", Numbers, blocked))
        ctx.tools.register(Tool.from_model("broken", "b", Numbers, broken))
        cases = {
            "max-tokens": scripted(ScriptedReply(text="partial", stop_reason="max-tokens")),
            "refusal": scripted(ScriptedReply(text="no", stop_reason="refusal")),
            "error": scripted(ScriptedReply(error="HTTP 500 from upstream")),
            "blocked": scripted(ScriptedReply(tool_calls=[call("blocked", a=1, b=1)])),
        }
        for expected, model in cases.items():
            agent = ctx.agents.create(model=model)
            outcome = await agent.run("go")
            assert outcome.stop_reason == expected, expected
        agent = ctx.agents.create(
            model=scripted(
                ScriptedReply(tool_calls=[call("broken", a=1, b=1), call("missing")]),
                ScriptedReply(text="recovered"),
            )
        )
        outcome = await agent.run("go")
        assert outcome.stop_reason == "completed"
        texts = [
            e.data["content"][0]["text"] for e in agent.session.events if e.type == "tool/result"
        ]
        assert texts[0] == "tool broken failed: RuntimeError: disk on fire"
        assert texts[1].startswith('unknown tool "missing" (available tools: blocked, broken')


async def test_model_error_message_is_kept() -> None:
    async with Context.open(PRESET) as ctx:
        agent = ctx.agents.create(model=scripted(ScriptedReply(error="HTTP 500: boom")))
        outcome = await agent.run("go")
        assert outcome.stop_reason == "error"
        assert outcome.error == "model call failed: HTTP 500: boom"


async def test_step_limit_ends_a_runaway_turn() -> None:
    async with Context.open(PRESET) as ctx:
        ctx.tools.register(add)
        agent = ctx.agents.create(
            model=scripted(ScriptedReply(tool_calls=[call("add", a=1, b=1)])), max_steps=3
        )
        outcome = await agent.run("loop forever")
        assert outcome.stop_reason == "error"
        assert outcome.error == "step limit reached (3 model calls in one turn)"


async def test_followup_steer_inject_and_queued_messages() -> None:
    gate = anyio.Event()

    async def wait_gate(args: Numbers, tctx: ToolContext) -> ToolResult:
        await gate.wait()
        return ToolResult("opened")

    seen_prompts: list[list[str]] = []

    def script(request: ModelRequest) -> ScriptedReply:
        users = [
            e.data["content"][0]["text"]
            for e in request.events
            if e.type == "user/message" and e.data["content"]
        ]
        seen_prompts.append(users)
        steps_in_turn = 0
        for e in reversed(request.events):
            if e.type == "turn/start":
                break
            steps_in_turn += e.type == "assistant/message"
        if users[-1] == "first" and steps_in_turn == 0:
            return ScriptedReply(tool_calls=[call("gate", a=0, b=0)])
        return ScriptedReply(text="seen " + ",".join(users))

    async with Context.open(PRESET) as ctx:
        ctx.tools.register(Tool.from_model("gate", "g", Numbers, wait_gate))
        agent = ctx.agents.create(model=BoundModel(ScriptedAdapter(script)))
        agent.inject("background")
        assert not agent.running
        agent.followup("first")
        while not any(e.type == "tool/call" for e in agent.session.events):
            await anyio.sleep(0.001)
        agent.steer("steered")
        agent.followup("second")
        assert agent.queued == 1
        gate.set()
        await agent.when_idle()
        assert agent.turns == 2
        # the steer landed inside turn 1 (after the tool result), the followup made turn 2
        assert seen_prompts[1] == ["background", "first", "steered"]
        assert seen_prompts[2] == ["background", "first", "steered", "second"]
        kinds = [e.data.get("kind") for e in agent.session.events if e.type == "user/message"]
        assert kinds == ["inject", None, "steer", None]


async def test_cancel_keeps_queued_messages_until_resume() -> None:
    async with Context.open(PRESET) as ctx:
        agent = ctx.agents.create(model=scripted(ScriptedReply(hang=True)))
        agent.followup("one")
        agent.followup("two")
        await anyio.sleep(0.01)
        agent.cancel()
        await agent.when_idle()
        assert agent.queued == 1
        agent.model = scripted(ScriptedReply(text="fine"))
        agent.resume()
        await agent.when_idle()
        assert agent.queued == 0
        assert [e.data["stop_reason"] for e in agent.session.events if e.type == "turn/end"] == [
            "aborted",
            "completed",
        ]


async def test_observers_see_events_and_streamed_deltas() -> None:
    async with Context.open(PRESET) as ctx:
        agent = ctx.agents.create(model=scripted(ScriptedReply(text="abcdef", chunks=3)))
        seen: list[tuple[int, str]] = []
        stop = agent.observe(lambda e: seen.append((e.seq, e.type)))
        await agent.run("go")
        stop()
        assert [t for s, t in seen if s == -1] == ["assistant/delta"] * 3
        assert [t for s, t in seen if s >= 0] == types(agent)


async def test_context_exit_aborts_running_turns_and_closes_agents() -> None:
    async with Context.open(PRESET) as ctx:
        agent = ctx.agents.create(model=scripted(ScriptedReply(hang=True)))
        agent.followup("go")
        await anyio.sleep(0.01)
    assert agent.closed
    assert agent.session.events[-1].data["stop_reason"] == "aborted"
    assert len(ctx.agents) == 0


async def test_per_agent_model_config_and_closed_agent_refuses_input() -> None:
    async with Context.open(PRESET) as ctx:
        agent = ctx.agents.create(
            model=ModelConfig(adapter="scripted", options={"replies": [{"text": "custom"}]})
        )
        await agent.run("x")
        assert last_output(agent.session.events) == "custom"
        await agent.aclose()
        with pytest.raises(RuntimeError, match="is closed"):
            agent.followup("more")
        with pytest.raises(ValueError, match='no LLM adapter named "nope"'):
            ctx.agents.create(model=ModelConfig(adapter="nope"))


async def test_concurrent_aclose_calls_both_wait_until_quiescent() -> None:
    release = anyio.Event()
    finished: list[str] = []

    async with Context.open(PRESET) as ctx:
        agent = ctx.agents.create(model=scripted(ScriptedReply(hang=True)))

        async def slow_hook() -> None:
            await release.wait()

        agent.on_close(slow_hook)
        agent.followup("go")
        await anyio.sleep(0.01)

        async def close(name: str) -> None:
            await agent.aclose()
            finished.append(name)

        async with anyio.create_task_group() as tg:
            tg.start_soon(close, "first")
            tg.start_soon(close, "second")
            await anyio.sleep(0.05)
            assert finished == []  # neither returns while the close hook is still running
            release.set()
        assert sorted(finished) == ["first", "second"]
        assert agent.closed
        assert not agent.running
        assert ctx.agents.get(agent.id) is None


async def test_start_runs_the_turn_in_a_task_of_its_own_that_a_waiter_cannot_cancel() -> None:
    async with Context.open(PRESET) as ctx:
        agent = adder(ctx)
        agent.start("add them")
        with anyio.move_on_after(0):  # a waiter that gives up at once
            await agent.when_idle()
        await agent.when_idle()  # the turn went on without it
        assert types(agent) == list(ONE_TOOL_CALL_TURN)
        assert last_output(agent.session.events) == "the answer is 42"
        agent.start("again")  # behind the first, once idle: a second turn
        agent.start("and again")  # queued while that one runs
        await agent.when_idle()
        turns = [e for e in agent.session.events if e.type == "turn/start"]
        assert len(turns) == 3
