"""The shell tool in the agent loop: permission policy (ask by default, --yes, deny,
approvers) and a spawn child running a real command."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dsh.core import (
    Context,
    ModelRequest,
    PermissionDecision,
    PermissionRequest,
    ScriptedReply,
    parse_preset,
)
from dsh.core.models import BoundModel
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.fixtures import call_then_echo, result_text, tool_results
from dsh.testing.processes import live_children
from dsh.testing.scripting import call, last_user_text, model, steps_in_turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

BASE = '[agent.model]\nadapter = "scripted"\n'
SHELL = '[[plugin]]\nname = "dsh-tool-shell"\n'


def run_then_echo(command: str) -> BoundModel:
    return call_then_echo("shell", command=command)


@pytest.fixture
async def unattended(tmp_path: Path) -> AsyncIterator[Context]:
    async with Context.open(parse_preset(BASE + SHELL), cwd=tmp_path) as ctx:
        yield ctx


async def test_ask_without_an_approver_is_refused_with_how_to_allow(
    unattended: Context, tmp_path: Path
) -> None:
    agent = unattended.agents.create(model=run_then_echo("touch marker"))
    await agent.run("go")
    (result,) = tool_results(agent)
    assert result["is_error"]
    assert result_text(result) == (
        'tool "shell" needs approval (Run `touch marker`) and nobody can answer: this agent'
        ' runs unattended. Allow it in the preset ([permissions.tools] shell = "allow") or'
        " run dsh with --yes."
    )
    assert not (tmp_path / "marker").exists()


async def test_allow_all_runs_it(unattended: Context, tmp_path: Path) -> None:
    unattended.permissions.allow_all = True
    agent = unattended.agents.create(model=run_then_echo("touch marker && echo made"))
    await agent.run("go")
    (result,) = tool_results(agent)
    assert result_text(result) == "made\n[exit status 0]"
    assert (tmp_path / "marker").exists()


async def test_preset_deny_wins_over_an_approver(tmp_path: Path) -> None:
    preset = BASE + SHELL + '[permissions.tools]\nshell = "deny"\n'
    async with Context.open(parse_preset(preset), cwd=tmp_path) as ctx:
        asked: list[PermissionRequest] = []

        async def approver(request: PermissionRequest) -> PermissionDecision:
            asked.append(request)
            return PermissionDecision(True)

        ctx.permissions.set_approver(approver)
        agent = ctx.agents.create(model=run_then_echo("touch marker"))
        await agent.run("go")
        (result,) = tool_results(agent)
        assert result["is_error"]
        assert result_text(result).startswith(
            'tool "shell" is denied by the permission policy (Run `touch marker`)'
        )
        assert asked == []
    assert not (tmp_path / "marker").exists()


async def test_preset_allow_runs_without_asking(tmp_path: Path) -> None:
    preset = BASE + SHELL + '[permissions.tools]\nshell = "allow"\n'
    async with Context.open(parse_preset(preset), cwd=tmp_path) as ctx:
        agent = ctx.agents.create(model=run_then_echo("echo allowed"))
        await agent.run("go")
        assert result_text(tool_results(agent)[0]) == "allowed\n[exit status 0]"


async def test_the_approver_decides(unattended: Context, tmp_path: Path) -> None:
    asked: list[PermissionRequest] = []
    answers = [
        PermissionDecision(False, "not now"),
        PermissionDecision(True, always=True),
    ]

    async def approver(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        return answers.pop(0)

    unattended.permissions.set_approver(approver)
    agent = unattended.agents.create(model=run_then_echo("touch marker && echo made"))
    await agent.run("first")
    assert not (tmp_path / "marker").exists()
    await agent.run("second")
    assert (tmp_path / "marker").exists()
    await agent.run("third")  # "always" the second time: not asked again
    first, second, third = tool_results(agent)
    assert result_text(first) == "not now"
    assert result_text(second) == "made\n[exit status 0]"
    assert not third["is_error"]
    assert len(asked) == 2
    request = asked[0]
    assert (request.tool, request.kind, request.title) == (
        "shell",
        "execute",
        "Run `touch marker && echo made`",
    )
    assert request.arguments == {"command": "touch marker && echo made", "timeout": None}


async def test_a_spawn_child_runs_a_real_command(tmp_path: Path) -> None:
    preset = (
        BASE
        + SHELL
        + '[[plugin]]\nname = "dsh-subagent-spawn-in-process"\n'
        + '[[plugin]]\nname = "dsh-tool-subagent"\nconfig = { provider = "spawn" }\n'
    )
    (tmp_path / "data.txt").write_text("alpha\nbeta\n")

    def script(request: ModelRequest) -> ScriptedReply:
        step = steps_in_turn(request)
        if last_user_text(request) == "count the lines":
            if step == 0:
                return ScriptedReply(tool_calls=[call("shell", command="wc -l < data.txt; pwd")])
            return ScriptedReply(text="child ran: {tool_results}")
        if step == 0:
            return ScriptedReply(
                tool_calls=[call("subagent", description="count", prompt="count the lines")]
            )
        return ScriptedReply(text="parent got: {tool_results}")

    before = live_children()
    async with Context.open(parse_preset(preset), cwd=tmp_path) as ctx:
        ctx.permissions.allow_all = True
        parent = ctx.agents.create(model=model(script))
        outcome = await parent.run("go")
        assert outcome.stop_reason == "completed"
        answer = parent.session.events[-2].data["content"][0]["text"]
        assert "child ran: " in answer
        assert f"2\n{tmp_path}\n[exit status 0]" in answer
    assert_no_new_processes(before, within=3.0)  # a sandbox's inner processes die last


@pytest.mark.parametrize(
    "narrowing", ["", ', agent_options = { sandbox = { mode = "read-only" } }']
)
async def test_a_spawn_child_gets_at_most_its_parents_sandbox(
    tmp_path: Path, narrowing: str
) -> None:
    """A child's shell runs in the parent's sandbox (here read-only for the whole tree, or
    narrowed to read-only by the delegating row): its write fails in the kernel, not in a
    filter, and it cannot reach dsh's /proc."""
    sandbox = '[sandbox]\nmode = "read-only"\n' if not narrowing else ""
    preset = (
        BASE
        + sandbox
        + SHELL
        + '[[plugin]]\nname = "dsh-subagent-spawn-in-process"\n'
        + '[[plugin]]\nname = "dsh-tool-subagent"\n'
        + f'config = {{ provider = "spawn"{narrowing} }}\n'
    )

    def script(request: ModelRequest) -> ScriptedReply:
        step = steps_in_turn(request)
        if last_user_text(request) == "write it":
            if step == 0:
                command = "echo pwned > child.txt; echo parent=$PPID"
                return ScriptedReply(tool_calls=[call("shell", command=command)])
            return ScriptedReply(text="child ran: {tool_results}")
        if step == 0:
            return ScriptedReply(
                tool_calls=[call("subagent", description="write", prompt="write it")]
            )
        return ScriptedReply(text="parent got: {tool_results}")

    async with Context.open(parse_preset(preset), cwd=tmp_path) as ctx:
        ctx.permissions.allow_all = True
        parent = ctx.agents.create(model=model(script))
        outcome = await parent.run("go")
        assert outcome.stop_reason == "completed"
        answer = parent.session.events[-2].data["content"][0]["text"]
    assert "Read-only file system" in answer
    assert "parent=1" in answer or "parent=0" in answer
    assert not (tmp_path / "child.txt").exists()
