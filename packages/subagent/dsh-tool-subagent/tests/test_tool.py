"""The subagent tool with the real runtime and agent loop; only the child is scripted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dsh.core import Agent, Context, ScriptedAdapter, ScriptedReply, ScriptedToolCall, parse_preset
from dsh.core.models import BoundModel
from dsh.core.plugins import PluginError
from dsh.subagent import ALL_START_CAPABILITIES, Budget, SubagentResult, SubagentRuntime
from dsh.testing.fixtures import ONE_TOOL_CALL_TURN
from dsh.testing.scripted_provider import HANG_PROMPT, ScriptedProvider

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]

BASE = '[agent.model]\nadapter = "scripted"\n'


def delegating_model(
    prompt: str = "find the bug", then: str = "parent saw: {tool_results}"
) -> BoundModel:
    return BoundModel(
        ScriptedAdapter(
            [
                ScriptedReply(
                    tool_calls=[
                        ScriptedToolCall(
                            name="subagent", arguments={"description": "look", "prompt": prompt}
                        )
                    ]
                ),
                ScriptedReply(text=then),
            ]
        )
    )


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(parse_preset(BASE)) as ctx:
        yield ctx


async def load_tool(ctx: Context, **config: Any) -> None:
    await ctx.plugins.load(
        "dsh-tool-subagent",
        {"provider": "scripted", **config},
        id=config.get("tool_name", "subagent"),
    )


def tool_result(agent: Agent) -> dict[str, Any]:
    (result,) = [e.data for e in agent.session.events if e.type == "tool/result"]
    return result


def result_text(agent: Agent) -> str:
    return str(tool_result(agent)["content"][0]["text"])


async def test_delegation_round_trip_and_parent_log_holds_only_call_and_result(
    ctx: Context,
) -> None:
    provider = ScriptedProvider(
        "scripted", reply="the bug is on line 3", capabilities=ALL_START_CAPABILITIES
    )
    SubagentRuntime.of(ctx).register_provider(provider)
    await load_tool(ctx)
    parent = ctx.agents.create(model=delegating_model())
    outcome = await parent.run("go")
    assert outcome.stop_reason == "completed"
    assert [e.type for e in parent.session.events] == list(ONE_TOOL_CALL_TURN)
    assert result_text(parent) == "the bug is on line 3"
    assert (
        parent.session.events[-2].data["content"][0]["text"] == "parent saw: the bug is on line 3"
    )
    (request,) = provider.starts
    assert request.prompt_text == "find the bug"
    assert request.label == "look"
    assert request.parent is parent
    assert request.max_depth == 3
    assert provider.disposals == 1


async def test_model_sees_only_description_and_prompt_worded_by_context_inheritance(
    ctx: Context,
) -> None:
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(ScriptedProvider("fresh", capabilities=ALL_START_CAPABILITIES))
    runtime.register_provider(
        ScriptedProvider("forky", capabilities=ALL_START_CAPABILITIES, inherits_parent_context=True)
    )
    await ctx.plugins.load(
        "dsh-tool-subagent", {"provider": "fresh", "tool_name": "a", "persona": "p"}, id="a"
    )
    await ctx.plugins.load("dsh-tool-subagent", {"provider": "forky", "tool_name": "b"}, id="b")
    a, b = ctx.tools.get("a"), ctx.tools.get("b")
    assert a is not None
    assert b is not None
    assert set(a.spec.parameters["properties"]) == {"description", "prompt"}
    assert a.spec.parameters["required"] == ["description", "prompt"]
    assert "no memory of this conversation" in a.spec.description
    assert "copy of this conversation's completed turns" in b.spec.description


STOP_CASES = [
    (SubagentResult("all good", "completed"), False, ["all good"]),
    (
        SubagentResult("half", "aborted", diagnostic="parent cancelled"),
        True,
        [
            "subagent run was cancelled",
            "Diagnostic: parent cancelled",
            "Partial output before the run ended: half",
        ],
    ),
    (
        SubagentResult("", "error", diagnostic="model call failed: HTTP 500"),
        True,
        ["subagent run failed", "Diagnostic: model call failed: HTTP 500"],
    ),
    (
        SubagentResult("so far", "max-tokens"),
        True,
        [
            "subagent run hit its token limit before finishing",
            "Partial output before the run ended: so far",
        ],
    ),
    (
        SubagentResult("", "refusal", diagnostic="policy"),
        True,
        ["subagent declined the task", "Diagnostic: policy"],
    ),
    (
        SubagentResult("x", "exploded"),
        True,
        ["subagent run ended abnormally (exploded)", "Partial output before the run ended: x"],
    ),
    (
        SubagentResult(
            "half done", "budget", diagnostic="token budget 2000 reached: 2150 tokens used"
        ),
        True,
        [
            "subagent run ran out of budget before finishing (it was stopped at its cap)",
            "Diagnostic: token budget 2000 reached: 2150 tokens used",
            "Partial output before the run ended: half done",
        ],
    ),
]


@pytest.mark.parametrize(("result", "is_error", "lines"), STOP_CASES)
async def test_every_stop_reason_is_mapped(
    ctx: Context, result: SubagentResult, is_error: bool, lines: list[str]
) -> None:
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES, respond=lambda r: result)
    )
    await load_tool(ctx)
    parent = ctx.agents.create(model=delegating_model())
    await parent.run("go")
    assert tool_result(parent)["is_error"] is is_error
    assert result_text(parent).split("\n") == lines


async def test_structured_output_is_returned_as_json(ctx: Context) -> None:
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES, structured={"bugs": 2})
    )
    await load_tool(ctx)
    parent = ctx.agents.create(model=delegating_model())
    await parent.run("go")
    assert result_text(parent) == '{"bugs": 2}'
    assert tool_result(parent)["data"]["structured"] == {"bugs": 2}


async def test_result_failure_and_dispose_failure_are_both_reported(ctx: Context) -> None:
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider(
            "scripted",
            capabilities=ALL_START_CAPABILITIES,
            result_error=ConnectionError("pipe closed"),
            dispose_error=OSError("kill failed"),
        )
    )
    await load_tool(ctx)
    parent = ctx.agents.create(model=delegating_model())
    await parent.run("go")
    assert tool_result(parent)["is_error"] is True
    assert result_text(parent).split("\n") == [
        "subagent run failed",
        "Diagnostic: the run's result could not be read: ConnectionError: pipe closed",
        "Cleanup also failed: OSError: kill failed",
    ]


async def test_dispose_failure_after_success_is_an_error(ctx: Context) -> None:
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider(
            "scripted",
            reply="done",
            capabilities=ALL_START_CAPABILITIES,
            dispose_error=OSError("zombie"),
        )
    )
    await load_tool(ctx)
    parent = ctx.agents.create(model=delegating_model())
    await parent.run("go")
    assert tool_result(parent)["is_error"] is True
    assert result_text(parent) == "done\n\nWarning: cleanup of the subagent failed: OSError: zombie"


async def test_start_refusal_becomes_an_error_result(ctx: Context) -> None:
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES)
    )
    await load_tool(ctx, max_depth=0)
    parent = ctx.agents.create(model=delegating_model())
    await parent.run("go")
    assert tool_result(parent)["is_error"] is True
    assert result_text(parent) == "subagent could not start: subagent depth 1 exceeds max_depth 0"


async def test_cancelling_the_parent_aborts_the_child_and_disposes(ctx: Context) -> None:
    provider = ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES)
    SubagentRuntime.of(ctx).register_provider(provider)
    await load_tool(ctx)
    parent = ctx.agents.create(model=delegating_model(prompt=HANG_PROMPT))
    parent.followup("go")
    with anyio.fail_after(2):
        while provider.live == 0:
            await anyio.sleep(0.001)
    parent.cancel("user pressed escape")
    with anyio.fail_after(2):
        await parent.when_idle()
    assert parent.session.events[-1].data["stop_reason"] == "aborted"
    assert provider.live == 0
    assert provider.disposals == 1
    assert SubagentRuntime.of(ctx).live_runs() == []


async def test_tool_follows_its_provider(ctx: Context) -> None:
    remove = SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES)
    )
    await load_tool(ctx)
    assert "subagent" in ctx.tools
    remove()
    assert "subagent" not in ctx.tools
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES)
    )
    assert "subagent" in ctx.tools
    await ctx.plugins.unload("subagent")
    assert "subagent" not in ctx.tools


async def test_a_tool_loaded_without_its_provider_fails_loud(ctx: Context) -> None:
    with pytest.raises(PluginError) as info:
        await load_tool(ctx)
    message = str(info.value)
    assert 'plugin "dsh-tool-subagent"' in message
    assert 'no subagent provider named "scripted" is registered' in message
    assert "add a [[plugin]] row for the provider's plugin" in message
    assert "subagent" not in ctx.tools
    assert ctx.plugins.get("subagent") is None  # nothing stays loaded


TWO_TOOLS = (
    BASE
    + """
[[plugin]]
name = "dsh-testing-scripted-provider"
config = { name = "alpha", reply = "from alpha", capabilities = { depth_limit = true } }

[[plugin]]
id = "beta-provider"
name = "dsh-testing-scripted-provider"
config = { name = "beta", reply = "from beta" }

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "alpha", tool_name = "subagent" }

[[plugin]]
id = "tool-beta"
name = "dsh-tool-subagent"
config = { provider = "beta", tool_name = "subagent_beta", max_depth = "provider-managed" }
"""
)


async def test_two_tool_rows_through_the_entry_point_loader() -> None:
    async with Context.open(parse_preset(TWO_TOOLS)) as ctx:
        assert {"subagent", "subagent_beta"} <= set(ctx.tools.names())
        model = BoundModel(
            ScriptedAdapter(
                [
                    ScriptedReply(
                        tool_calls=[
                            ScriptedToolCall(
                                name="subagent", arguments={"description": "a", "prompt": "x"}
                            ),
                            ScriptedToolCall(
                                name="subagent_beta", arguments={"description": "b", "prompt": "y"}
                            ),
                        ]
                    ),
                    ScriptedReply(text="{tool_results}"),
                ]
            )
        )
        parent = ctx.agents.create(model=model)
        await parent.run("go")
        assert parent.session.events[-2].data["content"][0]["text"] == "from alpha\nfrom beta"


async def test_duplicate_tool_name_fails_the_load() -> None:
    preset = parse_preset(
        TWO_TOOLS.replace('tool_name = "subagent_beta"', 'tool_name = "subagent"')
    )
    with pytest.raises(PluginError) as info:
        async with Context.open(preset):
            pass
    assert 'preset row 4 (id "tool-beta", plugin "dsh-tool-subagent")' in str(info.value)
    assert 'a tool named "subagent" is already registered' in str(info.value)


async def test_numeric_max_depth_without_depth_limit_fails_the_load() -> None:
    preset = parse_preset(TWO_TOOLS.replace('max_depth = "provider-managed"', "max_depth = 2"))
    with pytest.raises(PluginError) as info:
        async with Context.open(preset):
            pass
    message = str(info.value)
    assert 'preset row 4 (id "tool-beta", plugin "dsh-tool-subagent")' in message
    assert (
        'max_depth = 2 needs the "depth_limit" capability, which provider "beta" lacks' in message
    )
    assert 'set max_depth = "provider-managed"' in message


async def test_persona_without_the_capability_fails_the_load() -> None:
    preset = parse_preset(
        TWO_TOOLS.replace(
            'max_depth = "provider-managed"', 'max_depth = "provider-managed", persona = "x"'
        )
    )
    with pytest.raises(PluginError, match='persona needs the "persona" capability'):
        async with Context.open(preset):
            pass


async def test_output_schema_without_the_capability_fails_the_load() -> None:
    schema = '{ type = "object", properties = { answer = { type = "string" } } }'
    preset = parse_preset(
        TWO_TOOLS.replace(
            'max_depth = "provider-managed"',
            f'max_depth = "provider-managed", output_schema = {schema}',
        )
    )
    with pytest.raises(PluginError, match='output_schema needs the "output_schema" capability'):
        async with Context.open(preset):
            pass


async def test_an_output_schema_that_is_not_object_rooted_is_named() -> None:
    preset = parse_preset(
        TWO_TOOLS.replace(
            'max_depth = "provider-managed"',
            'max_depth = "provider-managed", output_schema = { type = "array" }',
        )
    )
    with pytest.raises(PluginError, match=r"invalid config: output_schema.*object-rooted"):
        async with Context.open(preset):
            pass


async def test_bad_max_depth_value_is_named() -> None:
    preset = parse_preset(TWO_TOOLS.replace('max_depth = "provider-managed"', "max_depth = -2"))
    with pytest.raises(PluginError, match=r"invalid config: max_depth.*-2"):
        async with Context.open(preset):
            pass


async def test_budget_without_the_capability_fails_the_load() -> None:
    preset = parse_preset(
        TWO_TOOLS.replace(
            'max_depth = "provider-managed"',
            'max_depth = "provider-managed", budget = { tokens = 20000 }',
        )
    )
    with pytest.raises(PluginError) as info:
        async with Context.open(preset):
            pass
    message = str(info.value)
    assert 'budget needs the "budget" capability, which provider "beta" lacks' in message
    assert "remove budget from this row or use a provider that has it (spawn, fork)" in message


async def test_budget_row_config_is_read_and_sent_with_every_start(ctx: Context) -> None:
    provider = ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES)
    SubagentRuntime.of(ctx).register_provider(provider)
    budget = {"tokens": 20000, "usd": 0.5, "seconds": 300, "children": 10, "turns": 8}
    await load_tool(ctx, budget=budget)
    parent = ctx.agents.create(model=delegating_model())
    await parent.run("go")
    (request,) = provider.starts
    assert request.budget == Budget(tokens=20000, usd=0.5, seconds=300, children=10, turns=8)


@pytest.mark.parametrize(
    ("budget", "field"),
    [({"tokens": 0}, "budget.tokens"), ({"dollars": 1}, "budget.dollars"), ({"turns": 1.5}, "")],
)
async def test_bad_budget_rows_are_named(budget: dict[str, Any], field: str) -> None:
    async with Context.open(parse_preset(BASE)) as ctx:
        SubagentRuntime.of(ctx).register_provider(
            ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES)
        )
        with pytest.raises(PluginError, match=r"invalid config: budget") as info:
            await load_tool(ctx, budget=budget)
        assert field in str(info.value)
