"""dsh-core's tracing seam on its own (no OpenTelemetry): what the agent loop reports
to an installed :class:`~dsh.core.tracing.Tracing`, in which order, and in which task."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from dsh.core import (
    Agent,
    Context,
    ModelRequest,
    ToolContext,
    ToolResult,
    TurnOutcome,
    parse_preset,
    tool,
)
from dsh.core.models import ModelDone, ToolCall
from dsh.core.tracing import NO_TRACING, TracedCall, Tracing, install_tracing

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
[[agent.model.options.replies.tool_calls]]
name = "echo"
arguments = { text = "a" }
[[agent.model.options.replies.tool_calls]]
name = "echo"
arguments = { text = "b" }
[[agent.model.options.replies]]
text = "done"
"""


class EchoArgs(BaseModel):
    text: str


class Recorder(Tracing):
    """Records every hook call and every end, with the task it ran in."""

    __slots__ = ("log",)
    enabled = True

    def __init__(self) -> None:
        self.log: list[tuple[str, Any, Any]] = []

    def _call(self, what: str) -> TracedCall:
        task = asyncio.current_task()
        self.log.append(("start", what, task))
        log = self.log

        class Call:
            def end(
                self,
                outcome: TurnOutcome | ModelDone | ToolResult | None,
                error: BaseException | None,
            ) -> None:
                assert asyncio.current_task() is task  # ended in the task that started it
                log.append(("end", what, outcome if error is None else error))

        return Call()

    def turn(self, agent: Agent, turn: int) -> TracedCall:
        assert agent.session.events[-1].type == "turn/start"
        return self._call(f"turn {turn}")

    def model_call(self, agent: Agent, request: ModelRequest) -> TracedCall:
        return self._call("model")

    def tool_call(self, agent: Agent, call: ToolCall) -> TracedCall:
        return self._call(f"tool {call.arguments['text']}")


async def test_the_loop_reports_turns_model_calls_and_tool_calls() -> None:
    recorder = Recorder()
    async with Context.open(parse_preset(PRESET)) as ctx:

        @tool("echo", "Echo the text.")  # concurrency-safe: both calls run at once
        async def echo(args: EchoArgs, tctx: ToolContext) -> str:
            await asyncio.sleep(0.01)
            return args.text

        ctx.tools.register(echo)
        dispose = install_tracing(ctx, recorder)
        with pytest.raises(ValueError, match="already installed"):
            install_tracing(ctx, Recorder())
        outcome = await ctx.agents.create().run("go")
        dispose()
        assert ctx.tracing is NO_TRACING
        await ctx.agents.create().run("again")  # not reported
    assert outcome.stop_reason == "completed"
    steps = [(kind, what) for kind, what, _ in recorder.log]
    assert steps[:3] == [("start", "turn 1"), ("start", "model"), ("end", "model")]
    # the two tool calls run concurrently, each in a task of its own
    assert sorted(steps[3:7]) == [
        ("end", "tool a"),
        ("end", "tool b"),
        ("start", "tool a"),
        ("start", "tool b"),
    ]
    assert steps[3:5] == [("start", "tool a"), ("start", "tool b")]
    assert steps[7:] == [("start", "model"), ("end", "model"), ("end", "turn 1")]
    tasks = {task for kind, what, task in recorder.log if kind == "start" and "tool" in what}
    assert len(tasks) == 2
    ends = [outcome for kind, _, outcome in recorder.log if kind == "end"]
    assert isinstance(ends[0], ModelDone)
    assert ends[0].stop_reason == "tool_calls"
    assert isinstance(ends[1], ToolResult)
    assert not ends[1].is_error
    assert isinstance(ends[-1], TurnOutcome)
    assert ends[-1].stop_reason == "completed"


async def test_a_cancelled_model_call_and_turn_end_with_the_error() -> None:
    preset = '[agent.model]\nadapter = "scripted"\n[[agent.model.options.replies]]\nhang = true\n'
    recorder = Recorder()
    async with Context.open(parse_preset(preset)) as ctx:
        install_tracing(ctx, recorder)
        agent = ctx.agents.create()
        agent.followup("go")
        while not any(what == "model" for _, what, _ in recorder.log):
            await asyncio.sleep(0.01)
        agent.cancel("stop")
        await agent.when_idle()
    ends = {what: outcome for kind, what, outcome in recorder.log if kind == "end"}
    assert isinstance(ends["model"], BaseException)  # the cancellation
    turn = ends["turn 1"]
    assert isinstance(turn, TurnOutcome)
    assert turn.stop_reason == "aborted"
