"""The file tools in the agent loop: permissions (allow / ask / deny, approvers,
--yes) and spawn children that use them, confined to their cwd, behind a tool filter."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh.core import (
    Context,
    ModelRequest,
    PermissionDecision,
    PermissionRequest,
    ScriptedAdapter,
    ScriptedReply,
    parse_preset,
)
from dsh.core.models import BoundModel
from dsh.testing.fixtures import call_then_echo, result_text, tool_results
from dsh.testing.scripting import call, last_user_text, model, steps_in_turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

BASE = '[agent.model]\nadapter = "scripted"\n'
FS = '[[plugin]]\nname = "dsh-tool-fs"\n'
SPAWN = """
[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent" %s}
"""


@pytest.fixture
async def unattended(tree: Any) -> AsyncIterator[Context]:
    """The standard situation of a test run: nobody to ask, nothing pre-allowed."""
    async with Context.open(parse_preset(BASE + FS), cwd=tree.work) as ctx:
        yield ctx


async def test_the_model_reads_a_file_through_the_loop(unattended: Context) -> None:
    agent = unattended.agents.create(model=call_then_echo("read_file", path="README.md"))
    outcome = await agent.run("what is the answer?")
    assert outcome.stop_reason == "completed"
    assert "The answer is 42." in agent.session.events[-2].data["content"][0]["text"]


# -- permissions --------------------------------------------------------------------------


async def test_write_asks_and_is_refused_when_nobody_can_answer(
    unattended: Context, tree: Any
) -> None:
    agent = unattended.agents.create(
        model=call_then_echo("write_file", path="notes.txt", content="hi")
    )
    await agent.run("write it")
    (result,) = tool_results(agent)
    assert result["is_error"]
    text = result_text(result)
    assert 'tool "write_file" needs approval (Write notes.txt) and nobody can answer' in text
    assert '[permissions.tools] write_file = "allow"' in text
    assert "--yes" in text
    assert not (tree.work / "notes.txt").exists()


async def test_reads_need_no_approval(unattended: Context) -> None:
    agent = unattended.agents.create(model=call_then_echo("grep", pattern="answer"))
    await agent.run("find it")
    (result,) = tool_results(agent)
    assert not result["is_error"]
    assert result_text(result) == "README.md:3:The answer is 42."


async def test_allow_all_runs_writes_without_asking(unattended: Context, tree: Any) -> None:
    unattended.permissions.allow_all = True  # dsh run --yes
    asked: list[PermissionRequest] = []

    async def approver(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        return PermissionDecision(False)

    unattended.permissions.set_approver(approver)
    agent = unattended.agents.create(
        model=call_then_echo("edit_file", path="README.md", old_string="42", new_string="43")
    )
    await agent.run("edit it")
    (result,) = tool_results(agent)
    assert not result["is_error"], result
    assert "The answer is 43." in (tree.work / "README.md").read_text()
    assert asked == []


@pytest.mark.parametrize(
    ("permissions", "tool", "arguments"),
    [
        ('[permissions.tools]\nwrite_file = "deny"\n', "write_file", {"path": "x", "content": "y"}),
        ('[permissions.tools]\nread_file = "deny"\n', "read_file", {"path": "README.md"}),
        ('[permissions]\ndefault = "deny"\n', "glob", {"pattern": "*"}),
    ],
)
async def test_preset_can_deny(
    tree: Any, permissions: str, tool: str, arguments: dict[str, Any]
) -> None:
    async with Context.open(parse_preset(BASE + FS + permissions), cwd=tree.work) as ctx:
        agent = ctx.agents.create(model=call_then_echo(tool, **arguments))
        await agent.run("go")
        (result,) = tool_results(agent)
        assert result["is_error"]
        assert f'tool "{tool}" is denied by the permission policy' in result_text(result)
        assert result["data"] == {"permission": "denied"}
    assert not (tree.work / "x").exists()


async def test_preset_can_allow_writes(tree: Any) -> None:
    preset = BASE + FS + '[permissions.tools]\nwrite_file = "allow"\n'
    async with Context.open(parse_preset(preset), cwd=tree.work) as ctx:
        agent = ctx.agents.create(
            model=call_then_echo("write_file", path="out.txt", content="done")
        )
        await agent.run("go")
        (result,) = tool_results(agent)
        assert not result["is_error"]
    assert (tree.work / "out.txt").read_text() == "done"


async def test_approver_is_asked_and_its_answer_respected(unattended: Context, tree: Any) -> None:
    asked: list[PermissionRequest] = []
    answers = [PermissionDecision(False, "the user said no"), PermissionDecision(True)]

    async def approver(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        return answers.pop(0)

    unattended.permissions.set_approver(approver)
    agent = unattended.agents.create(
        model=call_then_echo("write_file", path="notes.txt", content="hi")
    )
    await agent.run("first")
    assert not (tree.work / "notes.txt").exists()
    await agent.run("second")
    assert (tree.work / "notes.txt").read_text() == "hi"
    first, second = tool_results(agent)
    assert first["is_error"]
    assert result_text(first) == "the user said no"
    assert not second["is_error"]
    assert [(r.tool, r.kind, r.title) for r in asked] == [
        ("write_file", "edit", "Write notes.txt"),
        ("write_file", "edit", "Write notes.txt"),
    ]
    assert asked[0].arguments == {"path": "notes.txt", "content": "hi"}
    assert asked[0].agent is agent


# -- spawn children -----------------------------------------------------------------------


def delegating(child_calls: list[Any]) -> BoundModel:
    """The parent delegates "child task"; the child makes ``child_calls``, then reports
    what it saw; the parent reports what the child said."""

    def script(request: ModelRequest) -> ScriptedReply:
        step = steps_in_turn(request)
        if last_user_text(request) == "child task":
            if step == 0:
                return ScriptedReply(tool_calls=child_calls)
            return ScriptedReply(text="child saw: {tool_results}")
        if step == 0:
            return ScriptedReply(
                tool_calls=[call("subagent", description="look", prompt="child task")]
            )
        return ScriptedReply(text="parent got: {tool_results}")

    return model(script)


def child_requests(bound: BoundModel) -> list[ModelRequest]:
    adapter = bound.adapter
    assert isinstance(adapter, ScriptedAdapter)
    return [r for r in adapter.requests if last_user_text(r) == "child task"]


async def test_spawn_child_uses_the_tools_confined_to_its_cwd(tree: Any) -> None:
    async with Context.open(parse_preset(BASE + FS + SPAWN % ""), cwd=tree.work) as ctx:
        bound = delegating(
            [
                call("read_file", path="README.md"),
                call("read_file", path="../outside/secret.txt"),
                call("write_file", path="child.txt", content="from the child"),
            ]
        )
        parent = ctx.agents.create(model=bound)
        ctx.permissions.allow_all = True
        outcome = await parent.run("go")
        assert outcome.stop_reason == "completed"
        answer = parent.session.events[-2].data["content"][0]["text"]
        assert "child saw:" in answer
        assert "The answer is 42." in answer
        assert 'path "../outside/secret.txt" is refused' in answer
        assert "top secret" not in answer
        assert (tree.work / "child.txt").read_text() == "from the child"


async def test_a_child_is_confined_to_its_own_cwd(tree: Any) -> None:
    async with Context.open(parse_preset(BASE + FS + SPAWN % ""), cwd=tree.work) as ctx:
        bound = delegating(
            [call("read_file", path="main.py"), call("read_file", path="../README.md")]
        )
        # the parent (and so its child) works in src/: README.md is outside
        parent = ctx.agents.create(model=bound, meta={"cwd": str(tree.work / "src")})
        await parent.run("go")
        answer = parent.session.events[-2].data["content"][0]["text"]
        assert "def main" in answer
        assert 'path "../README.md" is refused' in answer
        assert str(tree.work / "src") in answer
        assert "The answer is 42" not in answer


async def test_child_approvals_go_to_the_parents_approver(tree: Any) -> None:
    async with Context.open(parse_preset(BASE + FS + SPAWN % ""), cwd=tree.work) as ctx:
        bound = delegating([call("write_file", path="child.txt", content="x")])
        parent = ctx.agents.create(model=bound)
        asked: list[PermissionRequest] = []

        async def approver(request: PermissionRequest) -> PermissionDecision:
            asked.append(request)
            return PermissionDecision(False, "not in this repository")

        ctx.permissions.set_approver(approver, agent=parent)
        await parent.run("go")
        answer = parent.session.events[-2].data["content"][0]["text"]
        assert "not in this repository" in answer
        (request,) = asked
        assert request.agent.parent_id == parent.id
        assert not (tree.work / "child.txt").exists()


async def test_tool_filter_hides_the_other_tools_from_the_child(tree: Any) -> None:
    preset = BASE + FS + SPAWN % ', tool_filter = { allow = ["read_file"] } '
    async with Context.open(parse_preset(preset), cwd=tree.work) as ctx:
        ctx.permissions.allow_all = True
        bound = delegating(
            [
                call("read_file", path="README.md"),
                call("write_file", path="child.txt", content="x"),
                call("grep", pattern="answer"),
            ]
        )
        parent = ctx.agents.create(model=bound)
        await parent.run("go")
        first = child_requests(bound)[0]
        assert [spec.name for spec in first.tools] == ["read_file"]
        parent_first = bound.adapter.requests[0]  # type: ignore[attr-defined]
        assert {"read_file", "write_file", "grep", "subagent"} <= {
            spec.name for spec in parent_first.tools
        }
        answer = parent.session.events[-2].data["content"][0]["text"]
        assert "The answer is 42." in answer
        assert 'unknown tool "write_file" (available tools: read_file)' in answer
        assert 'unknown tool "grep"' in answer
        assert not (tree.work / "child.txt").exists()


async def test_tool_filter_naming_a_missing_tool_fails(tree: Any) -> None:
    preset = BASE + FS + SPAWN % ', tool_filter = { allow = ["fs_read_file"] } '
    async with Context.open(parse_preset(preset), cwd=tree.work) as ctx:
        parent = ctx.agents.create(model=delegating([]))
        await parent.run("go")
        (result,) = tool_results(parent)
        assert result["is_error"]
        assert "fs_read_file" in result_text(result)
