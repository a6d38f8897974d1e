"""``Context.open(budget=...)``: one budget for every agent of a context and everything
they delegate; a context with a budget and no subagent runtime fails to open."""

from __future__ import annotations

import anyio
import pytest
from pydantic import BaseModel

from dsh.core import (
    ConfigError,
    Context,
    ModelRequest,
    ScriptedReply,
    Tool,
    ToolContext,
    parse_preset,
)
from dsh.subagent import Budget, SubagentRuntime
from dsh.subagent_in_process_driver import InProcessProvider
from dsh.testing.scripting import call, last_user_text, model

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

WORDS = " ".join(["word"] * 100)  # the scripted adapter counts 100 output tokens
PRESET = parse_preset(
    """
[agent.model]
adapter = "scripted"

[[plugin]]
name = "dsh-testing-scripted-provider"
"""
)


class NoArgs(BaseModel):
    pass


async def noop(args: NoArgs, tctx: ToolContext) -> str:
    await anyio.sleep(0.01)
    return "ok"


async def test_one_budget_for_the_whole_context() -> None:
    spent: list[int] = []

    def script(request: ModelRequest) -> ScriptedReply:
        spent.append(100)
        if last_user_text(request) == "lead":
            return ScriptedReply(
                text=WORDS, tool_calls=[call("subagent", description="d", prompt="loop")]
            )
        return ScriptedReply(text=WORDS, tool_calls=[call("noop")])

    async with Context.open(PRESET, budget=Budget(tokens=1000)) as ctx:
        ctx.tools.register(Tool.from_model("noop", "does nothing", NoArgs, noop))
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(InProcessProvider("spawn", fork=False))
        await ctx.plugins.load("dsh-tool-subagent", {"provider": "spawn"}, id="subagent")
        lead = ctx.agents.create(model=model(script))
        with anyio.fail_after(10):
            outcome = await lead.run("lead")
        assert outcome.stop_reason == "aborted"
        context = runtime.meters.context
        assert context is not None
        assert context.tripped is not None
        assert context.tripped[0] == "budget"
        assert context.tripped[1].startswith("token budget 1000 reached: ")
        assert sum(spent) <= 1000 + 100  # N + one call's worth
        assert context.tokens == sum(spent)
        assert runtime.live_runs() == []
        # a root agent created later is under the same, spent, budget
        late = ctx.agents.create(model=model(script))
        with anyio.fail_after(10):
            assert (await late.run("lead")).stop_reason == "aborted"
        assert sum(spent) <= 1000 + 200


async def test_a_budget_needs_the_subagent_runtime() -> None:
    bare = parse_preset('[agent.model]\nadapter = "scripted"\n')
    with pytest.raises(ConfigError, match="needs the subagent runtime"):
        async with Context.open(bare, budget=Budget(tokens=10)):
            pass
