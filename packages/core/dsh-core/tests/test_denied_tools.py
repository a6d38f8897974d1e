"""A tool whose permission is ``deny`` is not offered to the model (its schema is not in
the request); a call to it anyway is refused. Titles never carry raw control
characters."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from dsh.core import (
    Context,
    ScriptedAdapter,
    ScriptedReply,
    ScriptedToolCall,
    Tool,
    ToolContext,
    parse_preset,
)
from dsh.core._llm import BoundModel

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]


class Command(BaseModel):
    command: str


async def _run(args: Command, tctx: ToolContext) -> str:
    return f"ran {args.command}"


def governed(name: str, permission: str = "ask") -> Tool:
    return Tool.from_model(
        name,
        f"the {name} tool",
        Command,
        _run,
        permission=permission,  # type: ignore[arg-type]
        kind="execute",
        title=lambda args: f"Run `{args.command}`",
    )


def preset(permissions: str) -> str:
    return '[agent.model]\nadapter = "scripted"\n' + permissions


def recording(*replies: ScriptedReply) -> tuple[ScriptedAdapter, BoundModel]:
    adapter = ScriptedAdapter(list(replies), mode="sequence")
    adapter.record_requests = True
    return adapter, BoundModel(adapter)


@pytest.mark.parametrize(
    "permissions",
    [
        '[permissions.tools]\nrun = "deny"\n',
        '[permissions]\ndefault = "deny"\n[permissions.tools]\nsafe = "allow"\n',
    ],
)
async def test_a_denied_tool_is_not_offered_and_a_call_anyway_is_refused(
    permissions: str,
) -> None:
    async with Context.open(parse_preset(preset(permissions))) as ctx:
        ctx.tools.register(governed("run"))
        ctx.tools.register(governed("safe", "allow"))
        ctx.tools.register(governed("free", None))  # type: ignore[arg-type]  # not governed
        adapter, model = recording(
            ScriptedReply(tool_calls=[ScriptedToolCall(name="run", arguments={"command": "x"})]),
            ScriptedReply(text="done"),
        )
        agent = ctx.agents.create(model=model)
        await agent.run("go")
        offered = [spec.name for spec in adapter.requests[0].tools]
        assert "run" not in offered
        assert "safe" in offered
        assert "free" in offered
        result = next(e for e in agent.session.events if e.type == "tool/result")
        assert result.data["is_error"]
        assert "denied by the permission policy" in result.data["content"][0]["text"]
        # A child agent of the same context gets the same view.
        child_adapter, child_model = recording(ScriptedReply(text="child done"))
        child = ctx.agents.create(model=child_model, parent=agent)
        await child.run("go")
        assert "run" not in [spec.name for spec in child_adapter.requests[0].tools]


async def test_ask_and_allow_are_offered_and_yes_offers_everything() -> None:
    async with Context.open(parse_preset(preset('[permissions]\ndefault = "deny"\n'))) as ctx:
        ctx.tools.register(governed("run"))
        ctx.permissions.allow_all = True  # dsh run --yes: deny does not survive it
        adapter, model = recording(ScriptedReply(text="done"))
        await ctx.agents.create(model=model).run("go")
        assert "run" in [spec.name for spec in adapter.requests[0].tools]
    async with Context.open(parse_preset(preset(""))) as ctx:
        ctx.tools.register(governed("run"))
        adapter, model = recording(ScriptedReply(text="done"))
        await ctx.agents.create(model=model).run("go")
        assert "run" in [spec.name for spec in adapter.requests[0].tools]


async def test_titles_show_control_characters() -> None:
    tool = governed("run")
    title = tool.title_for(Command(command="touch X #\x1b[2K\rRun `ls -la`\x9b\u202e"))
    assert title == "Run `touch X #\\x1b[2K\\rRun `ls -la`\\x9b\\u202e`"
    plain = Tool.from_model("plain", "no title", Command, _run)
    assert "\x1b" not in plain.title_for(Command(command="a\x1bb\x85c"))
    assert "\\x85" in plain.title_for(Command(command="a\x1bb\x85c"))
