"""``report`` with the real runtime, provider and agent loop; only the models are scripted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Agent, Context, ModelRequest, ScriptedReply, parse_preset
from dsh.subagent import NOTICE_REPORT, NOTICE_SETTLED, SubagentRuntime, SubagentStartRequest
from dsh.testing.fixtures import SCRIPTED_PRESET, plugin_rows
from dsh.testing.scripting import call, model, steps_in_turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(15)]

PRESET = parse_preset(
    SCRIPTED_PRESET + plugin_rows("dsh-subagent-spawn-in-process", "dsh-tool-subagent-report")
)


class Script:
    """Children report once, then finish; the parent answers notices."""

    def __init__(self) -> None:
        self.child_tools: list[list[str]] = []

    def __call__(self, request: ModelRequest) -> ScriptedReply:
        if "You are a subagent" not in request.system:
            return ScriptedReply(text="noted")
        self.child_tools.append([spec.name for spec in request.tools])
        if steps_in_turn(request) == 0 and "report" in self.child_tools[-1]:
            return ScriptedReply(tool_calls=[call("report", message="halfway there")])
        return ScriptedReply(text="finished: {tool_results}")


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(PRESET) as ctx:
        yield ctx


def notices(parent: Agent) -> list[dict[str, Any]]:
    return [
        dict(e.data)
        for e in parent.session.events
        if e.type == "user/message" and e.data.get("kind") == "notice"
    ]


async def settle(parent: Agent, count: int) -> list[dict[str, Any]]:
    with anyio.fail_after(5):
        while len(notices(parent)) < count:
            await anyio.sleep(0.005)
        await parent.when_idle()
    return notices(parent)


async def test_a_report_reaches_the_live_parent_as_one_notice(ctx: Context) -> None:
    script = Script()
    parent = ctx.agents.create(model=model(script))
    runtime = SubagentRuntime.of(ctx)
    child = await runtime.start_continuable(
        "spawn", SubagentStartRequest("work", parent, AbortSignal())
    )
    received = await settle(parent, 2)  # the report, then the settlement
    reports = [n for n in received if n["source"]["type"] == NOTICE_REPORT]
    assert len(reports) == 1
    assert reports[0]["source"]["agent_id"] == child.id
    assert "halfway there" in reports[0]["content"][0]["text"]
    assert [n["source"]["type"] for n in received] == [NOTICE_REPORT, NOTICE_SETTLED]
    (record,) = runtime.continuable.list(parent)
    assert record.last_output == f"finished: Report delivered to your parent agent {parent.id}."


async def test_only_continuable_children_see_report(ctx: Context) -> None:
    script = Script()
    parent = ctx.agents.create(model=model(script))
    assert "report" not in parent.tools.names()
    runtime = SubagentRuntime.of(ctx)
    run = await runtime.start("spawn", SubagentStartRequest("one-shot work", parent, AbortSignal()))
    async with run:
        result = await run.result
    assert "report" not in script.child_tools[-1]
    assert result.output == "finished: "
    assert notices(parent) == []  # a one-shot child reports nothing


async def test_unloading_the_plugin_takes_report_away(ctx: Context) -> None:
    script = Script()
    parent = ctx.agents.create(model=model(script))
    await ctx.plugins.unload("dsh-tool-subagent-report")
    runtime = SubagentRuntime.of(ctx)
    await runtime.start_continuable("spawn", SubagentStartRequest("work", parent, AbortSignal()))
    received = await settle(parent, 1)
    assert [n["source"]["type"] for n in received] == [NOTICE_SETTLED]
    assert "report" not in script.child_tools[0]
