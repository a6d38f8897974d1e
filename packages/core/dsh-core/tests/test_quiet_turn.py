"""A turn nobody watches, traces or limits pays for none of that machinery: no
permission policy is weighed for ungoverned tools, no tracing hook, observer or
steering flush is called, and ``Agent.run`` on an idle agent schedules no driver
callback. What a governed tool needs is still done (its policy is weighed, a denied
tool is hidden, also one registered after the agent's tools were first offered)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest
from pydantic import BaseModel

from dsh.core import (
    AbortSignal,
    Agent,
    Context,
    Permissions,
    ScriptedAdapter,
    ScriptedReply,
    ScriptedToolCall,
    Tool,
    ToolContext,
)
from dsh.core.models import BoundModel
from dsh.core.permissions import PermissionsConfig
from dsh.core.tracing import Tracing

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

_CORE = f"{os.sep}dsh{os.sep}core{os.sep}"


class Args(BaseModel):
    text: str = ""


async def _constant(args: Args, tctx: ToolContext) -> str:
    return "constant"


def _tool(name: str, permission: Any = None) -> Tool:
    return Tool.from_model(name, name, Args, _constant, permission=permission)


def _model(tool_name: str) -> BoundModel:
    return BoundModel(
        ScriptedAdapter(
            [
                ScriptedReply(tool_calls=[ScriptedToolCall(name=tool_name, arguments={})]),
                ScriptedReply(text="done"),
            ]
        )
    )


@contextmanager
def _calls() -> Iterator[set[str]]:
    """The names of dsh.core's Python functions called while the block runs."""
    seen: set[str] = set()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and _CORE in frame.f_code.co_filename:
            seen.add(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


async def test_an_unwatched_turn_calls_no_optional_machinery() -> None:
    async with Context.open() as ctx:
        ctx.tools.register(_tool("constant"))
        ctx.tools.register(_tool("other"))
        agent = ctx.agents.create(model=_model("constant"))
        await agent.run("warm up")  # the first turn fills the caches every turn shares
        with _calls() as called:
            outcome = await agent.run("go")
        assert outcome.stop_reason == "completed"
        results = [e.data for e in agent.session.events if e.type == "tool/result"]
        assert results[-1]["content"][0]["text"] == "constant"
    # Qualified names of where the methods are defined (a base class's, if they moved).
    optional = {
        Permissions.policy_for.__qualname__,  # no governed tool: nothing to weigh
        Permissions.check.__qualname__,
        Tracing.turn.__qualname__,  # no tracer installed
        Tracing.model_call.__qualname__,
        Tracing.tool_call.__qualname__,
        "TurnLoop._notify",  # nobody observes the agent
        "TurnLoop._flush_steer",  # nothing was steered
        Context.call_soon.__qualname__,  # run() on an idle agent runs the turn in its own task
        Agent._spawn_driver.__qualname__,
    }
    assert called & optional == set()
    assert "TurnLoop._run_turn" in called  # the profile saw the turn


async def test_a_governed_tool_is_still_weighed_and_a_later_denied_one_hidden() -> None:
    config = PermissionsConfig(tools={"late": "deny"})
    async with Context.open() as ctx:
        ctx.permissions.config = config
        ctx.permissions.allow_all = False
        ctx.tools.register(_tool("constant"))
        ctx.tools.register(_tool("asked", permission="allow"))
        agent = ctx.agents.create(model=_model("asked"))
        assert [t.name for t in agent.tools.governed()] == ["asked"]
        with _calls() as called:
            await agent.run("go")
        assert Permissions.policy_for.__qualname__ in called
        offered = [s.name for s in ctx.permissions.offered(agent.tools)]
        assert offered == ["constant", "asked"]
        ctx.tools.register(_tool("late", permission="ask"))  # after the specs were cached
        assert [t.name for t in agent.tools.governed()] == ["asked", "late"]
        assert [s.name for s in ctx.permissions.offered(agent.tools)] == ["constant", "asked"]
        agent.tools.refuse("no tools now")
        assert agent.tools.governed() == ()


async def test_tool_context_asks_the_agents_permissions() -> None:
    async with Context.open() as ctx:
        ctx.permissions.config = PermissionsConfig(tools={"guarded": "deny"})
        guarded = _tool("guarded", permission="ask")
        ctx.tools.register(guarded)
        agent = ctx.agents.create(model=_model("guarded"))
        decision = await ToolContext(agent, "call-1", AbortSignal()).check_permission(
            guarded, Args()
        )
        assert not decision.allowed
        assert 'tool "guarded" is denied' in decision.reason
