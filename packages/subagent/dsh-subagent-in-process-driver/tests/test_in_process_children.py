"""The in-process driver with the real loop and the real tool; the model is scripted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from dsh.core import (
    AbortSignal,
    Agent,
    Context,
    ModelRequest,
    ScriptedAdapter,
    ScriptedReply,
    SessionStore,
    Tool,
    ToolContext,
    parse_preset,
)
from dsh.subagent import SubagentError, SubagentRuntime, SubagentStartRequest, ToolFilter
from dsh.subagent_in_process_driver import DELEGATION_SECTION, DESCRIPTOR_EVENT, InProcessProvider
from dsh.testing.fixtures import ONE_TOOL_CALL_TURN
from dsh.testing.scripting import call, last_user_text, model, steps_in_turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(15)]

PRESET = parse_preset('[agent.model]\nadapter = "scripted"\n')


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(PRESET) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(InProcessProvider("spawn", fork=False))
        runtime.register_provider(InProcessProvider("fork", fork=True))
        yield ctx


async def load_tool(
    ctx: Context, provider: str = "spawn", tool_name: str = "subagent", **config: Any
) -> None:
    await ctx.plugins.load(
        "dsh-tool-subagent", {"provider": provider, "tool_name": tool_name, **config}, id=tool_name
    )


def tool_results(agent: Agent) -> list[str]:
    return [e.data["content"][0]["text"] for e in agent.session.events if e.type == "tool/result"]


def all_agents_depths(ctx: Context, seen: list[Agent]) -> list[int]:
    return sorted(a.depth for a in seen)


async def test_recursion_bomb_stops_at_exactly_max_depth(ctx: Context) -> None:
    created: list[int] = []

    def always_delegate(request: ModelRequest) -> ScriptedReply:
        if steps_in_turn(request) == 0:
            return ScriptedReply(
                tool_calls=[call("subagent", description="go deeper", prompt="recurse")]
            )
        return ScriptedReply(text="level done: {tool_results}")

    original_create = ctx.agents.create

    def counting_create(**kwargs: Any) -> Agent:
        agent = original_create(**kwargs)
        created.append(agent.depth)
        return agent

    ctx.agents.create = counting_create  # type: ignore[method-assign]
    await load_tool(ctx, max_depth=3)
    root = original_create(model=model(always_delegate))
    outcome = await root.run("start the bomb")
    assert outcome.stop_reason == "completed"
    assert created == [1, 2, 3]  # exactly max_depth levels of children, no more
    final = root.session.events[-2].data["content"][0]["text"]
    assert final.count("level done") == 4  # the root and its 3 levels of children
    assert "subagent could not start: subagent depth 4 exceeds max_depth 3" in final


async def test_fork_cannot_bypass_max_depth(ctx: Context) -> None:
    def always_fork(request: ModelRequest) -> ScriptedReply:
        if steps_in_turn(request) == 0:
            return ScriptedReply(
                tool_calls=[call("subagent_fork", description="d", prompt="again")]
            )
        return ScriptedReply(text="ok {tool_results}")

    await load_tool(ctx, provider="fork", tool_name="subagent_fork", max_depth=2)
    root = ctx.agents.create(model=model(always_fork))
    await root.run("warm up")  # a completed turn for forks to inherit
    await root.run("fork forever")
    assert (
        "subagent depth 3 exceeds max_depth 2" in root.session.events[-2].data["content"][0]["text"]
    )


async def test_a_nested_chain_cannot_lift_an_inherited_limit(ctx: Context) -> None:
    """The root's tool caps depth at 1; a child using a tool with max_depth=10 is still capped."""
    depths: list[int] = []

    def script(request: ModelRequest) -> ScriptedReply:
        if steps_in_turn(request) == 0:
            tool = "subagent" if last_user_text(request) == "root task" else "deep"
            return ScriptedReply(tool_calls=[call(tool, description="d", prompt="child task")])
        return ScriptedReply(text="{tool_results}")

    await load_tool(ctx, max_depth=1)
    await load_tool(ctx, tool_name="deep", max_depth=10)
    root = ctx.agents.create(model=model(script))
    ctx.events.on("subagent/start", lambda e: depths.append(1))
    await root.run("root task")
    assert depths == [1]
    assert (
        "subagent depth 2 exceeds max_depth 1" in root.session.events[-2].data["content"][0]["text"]
    )


class Secret(BaseModel):
    text: str = ""


async def test_a_filtered_tool_can_be_neither_seen_nor_executed(ctx: Context) -> None:
    ran: list[str] = []

    async def secret(args: Secret, tctx: ToolContext) -> str:
        ran.append(tctx.agent.id)
        return "launch codes"

    ctx.tools.register(Tool.from_model("secret", "Reveal the secret", Secret, secret))
    ctx.tools.register(Tool.from_model("public", "Harmless", Secret, secret))
    child_requests: list[ModelRequest] = []

    def script(request: ModelRequest) -> ScriptedReply:
        if last_user_text(request) == "parent task":
            if steps_in_turn(request) == 0:
                return ScriptedReply(
                    tool_calls=[call("subagent", description="d", prompt="child task")]
                )
            return ScriptedReply(text="{tool_results}")
        child_requests.append(request)
        if steps_in_turn(request) == 0:
            return ScriptedReply(tool_calls=[call("secret", text="please")])
        return ScriptedReply(text="child saw: {tool_results}")

    await load_tool(ctx, tool_filter={"deny": ["secret"]})
    root = ctx.agents.create(model=model(script))
    await root.run("parent task")
    visible = [spec.name for spec in child_requests[0].tools]
    assert "secret" not in visible
    assert "public" in visible
    assert ran == []  # never executed, although the model asked for it by name
    assert 'unknown tool "secret"' in root.session.events[-2].data["content"][0]["text"]


async def test_tool_filter_rules(ctx: Context) -> None:
    async def noop(args: Secret, tctx: ToolContext) -> str:
        return ""

    ctx.tools.register(Tool.from_model("a", "a", Secret, noop))
    ctx.tools.register(Tool.from_model("b", "b", Secret, noop))
    parent = ctx.agents.create()
    spawn = InProcessProvider("x", fork=False)

    def child_for(flt: ToolFilter) -> Agent:
        return spawn.create_child(SubagentStartRequest("t", parent, AbortSignal(), tool_filter=flt))

    assert child_for(ToolFilter(allow=())).tools.names() == []
    assert child_for(ToolFilter(allow=("b", "a"), deny=("a",))).tools.names() == ["b"]
    deny_only = child_for(ToolFilter(deny=("a",)))
    ctx.tools.register(Tool.from_model("c", "later", Secret, noop))
    assert deny_only.tools.names() == ["b", "c"]  # tools registered later are admitted
    with pytest.raises(SubagentError) as info:
        child_for(ToolFilter(allow=("a", "nope")))
    assert info.value.code == "INVALID_REQUEST"
    assert str(info.value) == "tool_filter names unknown tools: nope (known tools: a, b, c)"
    # a grandchild never sees more than its parent
    narrowed = child_for(ToolFilter(allow=("a",)))
    grandchild = spawn.create_child(
        SubagentStartRequest("t", narrowed, AbortSignal(), tool_filter=ToolFilter(allow=("a", "b")))
    )
    assert grandchild.tools.names() == ["a"]


async def test_persona_reaches_the_child_system_prompt_only(ctx: Context) -> None:
    systems: dict[str, str] = {}

    def script(request: ModelRequest) -> ScriptedReply:
        who = "parent" if last_user_text(request) == "parent task" else "child"
        systems.setdefault(who, request.system)
        if who == "parent" and steps_in_turn(request) == 0:
            return ScriptedReply(
                tool_calls=[call("subagent", description="d", prompt="child task")]
            )
        return ScriptedReply(text="ok")

    await load_tool(ctx, persona="You are Captain Delegate, a meticulous auditor.")
    root = ctx.agents.create(model=model(script))
    await root.run("parent task")
    assert "Captain Delegate" in systems["child"]
    assert "Captain Delegate" not in systems["parent"]
    assert "helpful, precise assistant" not in systems["child"]  # replaced, not appended
    assert "helpful, precise assistant" in systems["parent"]
    assert "Your permission scope is fixed" in systems["child"]
    assert DELEGATION_SECTION not in systems["parent"]


SCHEMA = {
    "type": "object",
    "properties": {
        "bugs": {"type": "integer", "minimum": 0},
        "files": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["bugs"],
    "additionalProperties": False,
}


async def test_structured_output_retry_after_an_invalid_call(ctx: Context) -> None:
    parent = ctx.agents.create()
    child_model = ScriptedAdapter(
        [
            ScriptedReply(tool_calls=[call("structured_output", bugs="many")]),
            ScriptedReply(tool_calls=[call("structured_output", bugs=2, files=["a.py"])]),
            ScriptedReply(tool_calls=[call("structured_output", bugs=3)]),
            ScriptedReply(text="reported 2 bugs"),
        ]
    )
    parent.model = type(parent.model)(child_model)
    run = await SubagentRuntime.of(ctx).start(
        "spawn", SubagentStartRequest("count bugs", parent, AbortSignal(), output_schema=SCHEMA)
    )
    async with run:
        result = await run.result
    assert result.stop_reason == "completed"
    assert result.structured == {"bugs": 2, "files": ["a.py"]}
    assert result.output == "reported 2 bugs"
    child = run.local_agent
    assert child is not None
    results = tool_results(child)
    assert results[0].startswith(
        "invalid arguments for tool structured_output: does not match the output schema: bugs:"
    )
    assert results[1] == "Structured output recorded. Finish with a one-line summary."
    assert (
        results[2]
        == "structured output is recorded; no further tool calls are allowed — finish now"
    )


async def test_completed_without_structured_output_is_an_error(ctx: Context) -> None:
    parent = ctx.agents.create(model=model(lambda r: ScriptedReply(text="I forgot the tool")))
    run = await SubagentRuntime.of(ctx).start(
        "spawn", SubagentStartRequest("count bugs", parent, AbortSignal(), output_schema=SCHEMA)
    )
    async with run:
        result = await run.result
    assert result.stop_reason == "error"
    assert result.diagnostic == "the subagent finished without calling structured_output"
    assert result.output == "I forgot the tool"


async def test_fork_child_sees_completed_turns_and_not_the_in_flight_one(ctx: Context) -> None:
    seen_by_child: list[list[str]] = []

    def script(request: ModelRequest) -> ScriptedReply:
        text = last_user_text(request)
        if text == "fork now":
            if steps_in_turn(request) == 0:
                return ScriptedReply(
                    tool_calls=[call("subagent_fork", description="d", prompt="what do you know?")]
                )
            return ScriptedReply(text="{tool_results}")
        if text == "what do you know?":
            seen_by_child.append([text for text in _texts(request) if text])
            return ScriptedReply(text="forked child saw {turns} turns")
        return ScriptedReply(text=f"noted: {text}")

    await load_tool(ctx, provider="fork", tool_name="subagent_fork")
    root = ctx.agents.create(model=model(script))
    await root.run("the codename is Aurora")
    prefix_length = len(root.session)
    await root.run("fork now")
    (texts,) = seen_by_child
    assert "the codename is Aurora" in texts
    assert "noted: the codename is Aurora" in texts
    assert "fork now" not in texts  # the in-flight turn is left out
    assert root.session.events[-2].data["content"][0]["text"] == "forked child saw 1 turns"
    (result,) = [e for e in root.session.events if e.type == "tool/result"]
    assert result.data["is_error"] is False
    assert prefix_length == 4  # user, turn/start, assistant, turn/end of the first turn
    assert ctx.agents.list() == [root]  # the child was disposed and closed after the call


def _texts(request: ModelRequest) -> list[str]:
    from dsh.core import text_of

    return [
        text_of(e.data.get("content"))
        for e in request.events
        if e.type in ("user/message", "assistant/message")
    ]


async def test_fork_with_no_completed_turn_has_no_seed(ctx: Context) -> None:
    parent = ctx.agents.create()
    provider = InProcessProvider("f", fork=True)
    child = provider.create_child(SubagentStartRequest("t", parent, AbortSignal()))
    assert len(child.session) == 0
    assert "seed_length" not in child.session.header.meta
    await parent.run("one")
    child2 = provider.create_child(SubagentStartRequest("t", parent, AbortSignal()))
    assert child2.session.header.meta["seed_length"] == len(parent.session) == 4
    assert child2.session.events[0] is parent.session.events[0]


async def test_cancelling_the_parent_tool_call_aborts_the_child(ctx: Context) -> None:
    child_started = anyio.Event()

    def script(request: ModelRequest) -> ScriptedReply:
        if last_user_text(request) == "parent task":
            return ScriptedReply(
                tool_calls=[call("subagent", description="d", prompt="slow child")]
            )
        child_started.set()
        return ScriptedReply(hang=True)

    await load_tool(ctx)
    root = ctx.agents.create(model=model(script))
    ends: list[str] = []
    ctx.events.on("subagent/end", lambda e: ends.append(e.data["stop_reason"]))
    root.followup("parent task")
    await child_started.wait()
    (child,) = [a for a in ctx.agents.list() if a is not root]
    root.cancel("user interrupted")
    with anyio.fail_after(2):
        await root.when_idle()
    assert ends == ["aborted"]
    assert child.closed
    assert child.session.events[-1].data["stop_reason"] == "aborted"
    assert ctx.agents.list() == [root]


async def test_parent_log_holds_only_the_call_and_result_and_the_child_is_persisted(
    tmp_path: Path,
) -> None:
    async with Context.open(PRESET, sessions_dir=tmp_path) as ctx:
        SubagentRuntime.of(ctx).register_provider(InProcessProvider("spawn", fork=False))
        await load_tool(ctx)

        def script(request: ModelRequest) -> ScriptedReply:
            if last_user_text(request) == "parent task" and steps_in_turn(request) == 0:
                return ScriptedReply(
                    tool_calls=[call("subagent", description="audit", prompt="child task")]
                )
            return ScriptedReply(text="answer for: {prompt}")

        root = ctx.agents.create(model=model(script))
        await root.run("parent task")
        assert [e.type for e in root.session.events] == list(ONE_TOOL_CALL_TURN)
        run_id = root.session.events[4].data["data"]["run_id"]
        root_id = root.id
    loaded = SessionStore(tmp_path).load(run_id)
    assert loaded.header.parent_session == root_id
    assert loaded.header.meta["delegation_depth"] == 1
    assert loaded.header.meta["max_depth"] == 3
    types = [e.type for e in loaded.events]
    assert types[:3] == ["user/message", "turn/start", DESCRIPTOR_EVENT]
    descriptor = loaded.events[2].data
    assert descriptor["provider"] == "spawn"
    assert descriptor["parent_session"] == root_id
    assert descriptor["depth"] == 1
    assert descriptor["label"] == "audit"
    assert loaded.events[-1].data["stop_reason"] == "completed"


async def test_agent_options_choose_the_child_model_and_are_validated(ctx: Context) -> None:
    parent = ctx.agents.create()
    request = SubagentStartRequest(
        "hi",
        parent,
        AbortSignal(),
        agent_options={
            "model": {"adapter": "scripted", "options": {"replies": [{"text": "custom child"}]}}
        },
    )
    run = await SubagentRuntime.of(ctx).start("spawn", request)
    async with run:
        assert (await run.result).output == "custom child"
    with pytest.raises(
        SubagentError, match="invalid agent_options: colour: Extra inputs are not permitted"
    ):
        await SubagentRuntime.of(ctx).start(
            "spawn",
            SubagentStartRequest("hi", parent, AbortSignal(), agent_options={"colour": "red"}),
        )
    with pytest.raises(SubagentError, match='invalid agent_options: no LLM adapter named "gpt"'):
        await SubagentRuntime.of(ctx).start(
            "spawn",
            SubagentStartRequest(
                "hi", parent, AbortSignal(), agent_options={"model": {"adapter": "gpt"}}
            ),
        )
    assert ctx.agents.list() == [parent]  # nothing left from the refused starts


async def test_model_errors_and_stop_reasons_settle_the_run(ctx: Context) -> None:
    cases = {
        "error": ScriptedReply(error="HTTP 500 upstream"),
        "max-tokens": ScriptedReply(text="partial", stop_reason="max-tokens"),
        "refusal": ScriptedReply(text="no", stop_reason="refusal"),
    }
    for expected, reply in cases.items():
        parent = ctx.agents.create(model=model(lambda r, reply=reply: reply))
        run = await SubagentRuntime.of(ctx).start(
            "spawn", SubagentStartRequest("x", parent, AbortSignal())
        )
        async with run:
            result = await run.result
        assert result.stop_reason == expected
    assert result.output == "no"
