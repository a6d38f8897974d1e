"""Continuable children through the real tools, runtime and agent loop (scripted models).

One scripted model serves the parent and its children (children are told apart by
the delegation section of their system prompt). The parent obeys commands in its
user message: ``start <prompt>`` (a continuable subagent), ``send <message>``,
``stop`` (interrupt), ``list [descendants]``; it answers any notice with
``noted``. A child obeys its prompt: ``report`` (reports, then finishes),
``hang``, ``spawn <prompt>`` (starts its own continuable child), else ``done:
<prompt>``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import Agent, Context, ModelRequest, ScriptedReply, parse_preset, text_of
from dsh.core.models import BoundModel
from dsh.subagent import (
    NOTICE_REPORT,
    NOTICE_SETTLED,
    SubagentRuntime,
)
from dsh.testing.fixtures import SCRIPTED_PRESET, last_user_kind, plugin_rows
from dsh.testing.scripting import call, last_user_text, steps_in_turn
from dsh.testing.scripting import model as scripted_model

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(15)]

SUBAGENT_MARK = "You are a subagent"

PRESET = parse_preset(
    SCRIPTED_PRESET
    + plugin_rows(
        "dsh-subagent-spawn-in-process",
        (
            "dsh-tool-subagent",
            {
                "provider": "spawn",
                "enable_run_in_background": True,
                "background_mode": "continuable",
            },
        ),
        "dsh-tool-subagent-control",
        "dsh-tool-subagent-report",
    )
)

SUBAGENT_MARK = "You are a subagent"


def child_of(request: ModelRequest) -> str | None:
    """The id of the first continuable child a tool result in the log names."""
    for event in request.events:
        if event.type == "tool/result":
            data = event.data.get("data")
            if isinstance(data, dict) and "agent_id" in data:
                return str(data["agent_id"])
    return None


class Story:
    """The script; it records every child request."""

    def __init__(self) -> None:
        self.child_requests: list[ModelRequest] = []
        self.target: str | None = None
        """Agent id the parent's send/stop commands address (default: its first child)."""

    def model(self) -> BoundModel:
        """A bound model running this script."""
        return scripted_model(self)

    def __call__(self, request: ModelRequest) -> ScriptedReply:
        if SUBAGENT_MARK in request.system:
            self.child_requests.append(request)
            return self.child(request)
        return self.parent(request)

    def parent(self, request: ModelRequest) -> ScriptedReply:
        if steps_in_turn(request) > 0:
            return ScriptedReply(text="{tool_results}")
        if last_user_kind(request) == "notice":
            return ScriptedReply(text="noted")
        command, _, rest = last_user_text(request).partition(" ")
        target = self.target or child_of(request) or "nobody"
        calls: dict[str, Any] = {
            "start": call("subagent", description="worker", prompt=rest, run_in_background=True),
            "send": call("send_message", agent_id=target, message=rest),
            "stop": call("interrupt_agent", agent_id=target),
            "list": call("list_agents", scope=rest or "children"),
        }
        if command in calls:
            return ScriptedReply(tool_calls=[calls[command]])
        return ScriptedReply(text=f"parent: {command}")

    def child(self, request: ModelRequest) -> ScriptedReply:
        prompt = last_user_text(request)
        step = steps_in_turn(request)
        if last_user_kind(request) == "notice":
            return ScriptedReply(text="child noted")
        if prompt == "hang":
            return ScriptedReply(hang=True)
        if prompt == "report":
            if step == 0:
                return ScriptedReply(tool_calls=[call("report", message="halfway there")])
            return ScriptedReply(text="finished after reporting")
        if prompt.startswith("spawn ") and step == 0:
            return ScriptedReply(
                tool_calls=[
                    call(
                        "subagent",
                        description="grandchild",
                        prompt=prompt.removeprefix("spawn "),
                        run_in_background=True,
                    )
                ]
            )
        if step > 0:
            return ScriptedReply(text="spawned: {tool_results}")
        return ScriptedReply(text=f"done: {prompt}")

    def child_prompts(self, index: int = -1) -> list[str]:
        """The user messages the child saw in its ``index``-th request."""
        request = self.child_requests[index]
        return [
            text_of(e.data.get("content"))
            for e in request.events
            if e.type == "user/message" and e.data.get("kind") is None
        ]


# -- helpers ------------------------------------------------------------------------


def notices(agent: Agent, kind: str | None = None) -> list[tuple[dict[str, Any], str]]:
    found = []
    for event in agent.session.events:
        if event.type == "user/message" and event.data.get("kind") == "notice":
            source = dict(event.data.get("source") or {})
            if kind is None or source.get("type") == kind:
                found.append((source, text_of(event.data["content"])))
    return found


def results(agent: Agent) -> list[tuple[str, bool, Any]]:
    return [
        (text_of(e.data["content"]), bool(e.data["is_error"]), e.data.get("data"))
        for e in agent.session.events
        if e.type == "tool/result"
    ]


def turn_ends(agent_or_events: Any) -> list[str]:
    events = getattr(getattr(agent_or_events, "session", None), "events", agent_or_events)
    return [str(e.data["stop_reason"]) for e in events if e.type == "turn/end"]


async def until(predicate: Callable[[], bool], timeout: float = 5) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.002)


def quiet(ctx: Context) -> bool:
    """Nothing running: no agent in a turn."""
    return not any(agent.running for agent in ctx.agents.list())


def registry(ctx: Context) -> Any:
    return SubagentRuntime.of(ctx).continuable


def other_tasks() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[Context]:
    async with Context.open(PRESET, sessions_dir=tmp_path) as ctx:
        yield ctx


async def start_child(ctx: Context, story: Story, prompt: str, **create: Any) -> tuple[Agent, str]:
    parent = ctx.agents.create(model=story.model(), **create)
    await parent.run(f"start {prompt}")
    text, is_error, data = results(parent)[0]
    assert not is_error, text
    return parent, str(data["agent_id"])


# -- the story ----------------------------------------------------------------------


async def test_messaged_twice_interrupted_resumed_after_restart_and_reports(
    tmp_path: Path,
) -> None:
    story = Story()
    async with Context.open(PRESET, sessions_dir=tmp_path) as ctx:
        parent, child_id = await start_child(ctx, story, "report")
        text, _, data = results(parent)[0]
        assert text.startswith(f"Started continuable subagent {child_id} in the background.")
        assert data["agent_id"] == child_id
        child = registry(ctx).get(child_id)
        assert child is not None
        assert child.agent is not None
        assert child.agent.session.persisted
        await until(lambda: quiet(ctx) and child.status != "running")

        # the report and exactly one settlement notice, marked as runtime bookkeeping
        ((report_source, report_text),) = notices(parent, NOTICE_REPORT)
        assert report_source == {"type": NOTICE_REPORT, "agent_id": child_id}
        assert report_text == f'[report from subagent {child_id} ("worker")]\nhalfway there'
        ((source, settled),) = notices(parent, NOTICE_SETTLED)
        assert source == {
            "type": NOTICE_SETTLED,
            "agent_id": child_id,
            "status": "settled",
            "stop_reason": "completed",
            "turn": 1,
        }
        assert settled.splitlines() == [
            f'[runtime notice] subagent {child_id} ("worker") settled: its turn 1 completed.',
            "Final output:",
            "finished after reporting",
            "It keeps its conversation; continue it with send_message.",
        ]
        assert child.status == "settled"

        # message 1: wakes the waiting child
        await parent.run("send second")
        assert results(parent)[-1][2]["delivery"] == "woken"
        await until(lambda: quiet(ctx) and len(notices(parent, NOTICE_SETTLED)) == 2)
        assert "Final output:\ndone: second" in notices(parent, NOTICE_SETTLED)[-1][1]

        # message 2: a long turn; a third message is queued behind it
        await parent.run("send hang")
        await until(lambda: child.agent is not None and child.agent.turns == 3)
        await parent.run("send queued later")
        assert results(parent)[-1][2]["delivery"] == "queued"
        assert child.status == "running"
        assert child.queued == 1

        # interrupt: the turn stops, the queued message is kept
        await parent.run("stop")
        text, is_error, data = results(parent)[-1]
        assert not is_error
        assert text == (
            f"Interrupted subagent {child_id}; its turn stopped. 1 queued message(s) are kept."
            " Continue it with send_message."
        )
        assert child.status == "idle"
        assert child.queued == 1
        assert child.agent is not None
        assert child.agent.paused
        await until(lambda: quiet(ctx))
        settles = notices(parent, NOTICE_SETTLED)
        assert len(settles) == 3  # one per settled turn, no more
        assert settles[-1][0]["status"] == "idle"
        assert settles[-1][1].startswith(
            f'[runtime notice] subagent {child_id} ("worker") was interrupted in its turn 3.'
        )
        assert turn_ends(child.agent) == ["completed", "completed", "aborted"]
        parent_id = parent.id
    # the context closed: the child's activation was drained; its session stays on disk
    assert (tmp_path / f"{child_id}.jsonl").exists()

    story = Story()
    async with Context.open(PRESET, sessions_dir=tmp_path) as ctx:
        parent = ctx.agents.resume(parent_id, model=story.model())
        assert registry(ctx).get(child_id) is None  # a new process knows nothing yet
        await parent.run("list")
        text, _, data = results(parent)[-1]
        (entry,) = data["agents"]
        assert entry["agent_id"] == child_id
        assert entry["status"] == "idle"
        assert entry["live"] is False
        assert entry["turns"] == 3
        await parent.run("send third")
        assert results(parent)[-1][2]["delivery"] == "resumed"
        child = registry(ctx).get(child_id)
        assert child is not None
        await until(lambda: quiet(ctx) and child.status == "settled")
        # the resumed child kept its whole conversation
        assert story.child_prompts() == ["report", "second", "hang", "third"]
        assert child.last_output == "done: third"
        ((source, settled),) = notices(parent, NOTICE_SETTLED)[-1:]
        assert source["turn"] == 4
        assert child.agent is not None
        assert turn_ends(child.agent) == ["completed", "completed", "aborted", "completed"]
        # the report tool is back in the resumed activation (scoped to it alone)
        assert "report" in [spec.name for spec in story.child_requests[-1].tools]
        assert "report" not in ctx.tools.names()


async def test_only_the_parent_may_message_and_only_an_ancestor_may_interrupt(
    ctx: Context,
) -> None:
    story = Story()
    parent, child_id = await start_child(ctx, story, "spawn hang")
    child = registry(ctx).get(child_id)
    assert child is not None
    await until(lambda: any(r.parent_id == child_id for r in registry(ctx).live()))
    (grandchild,) = [r for r in registry(ctx).live() if r.parent_id == child_id]
    await until(lambda: grandchild.status == "running" and child.status != "running")

    stranger_story = Story()
    stranger_story.target = child_id
    stranger = ctx.agents.create(model=stranger_story.model())
    await stranger.run("send let me in")
    await stranger.run("stop")
    refused = results(stranger)
    assert [(is_error, data) for _, is_error, data in refused] == [
        (True, {"code": "UNAUTHORIZED"}),
        (True, {"code": "UNAUTHORIZED"}),
    ]
    assert refused[0][0] == (
        f'send_message refused: agent "{stranger.id}" may not message subagent "{child_id}":'
        f' only its parent "{parent.id}" may'
    )
    assert refused[1][0] == (
        f'interrupt_agent refused: agent "{stranger.id}" may not interrupt subagent'
        f' "{child_id}": only its parent "{parent.id}" or another live ancestor may'
    )
    # the grandparent may interrupt its grandchild, but not message it
    story.target = grandchild.id
    await parent.run("send from grandpa")
    text, is_error, data = results(parent)[-1]
    assert is_error
    assert data == {"code": "UNAUTHORIZED"}
    assert f'only its parent "{child_id}" may' in text
    await parent.run("stop")
    text, is_error, data = results(parent)[-1]
    assert not is_error, text
    assert data["interrupted"] is True
    await until(lambda: grandchild.status == "idle")
    # nobody interrupts itself
    assert child.agent is not None
    with pytest.raises(Exception, match="cannot interrupt itself") as info:
        await registry(ctx).interrupt(child.agent, child_id)
    assert getattr(info.value, "code", None) == "UNAUTHORIZED"
    await until(lambda: quiet(ctx))


async def test_exactly_one_settlement_notice_per_settle_even_for_busy_parents(
    ctx: Context,
) -> None:
    story = Story()
    parent, child_id = await start_child(ctx, story, "first")
    child = registry(ctx).get(child_id)
    assert child is not None
    for n in range(5):
        await until(lambda: quiet(ctx))
        await parent.run(f"send msg{n}")
    await until(lambda: quiet(ctx) and child.turns == 6)
    await anyio.sleep(0.05)
    settles = notices(parent, NOTICE_SETTLED)
    assert [s["turn"] for s, _ in settles] == [1, 2, 3, 4, 5, 6]
    assert [t.split("Final output:\n")[1].splitlines()[0] for _, t in settles] == [
        "done: first",
        *[f"done: msg{n}" for n in range(5)],
    ]


async def test_owner_disposal_drains_children_and_cancels_jobs_leaving_nothing(
    ctx: Context,
) -> None:
    before = other_tasks()
    story = Story()
    parent = ctx.agents.create(model=story.model())
    await ctx.plugins.load("dsh-tool-jobs")
    await parent.run("start hang")
    await parent.run("start spawn hang")
    await until(lambda: len(registry(ctx).live()) == 3)
    runtime = SubagentRuntime.of(ctx)

    async def forever(signal: Any) -> Any:
        await anyio.sleep_forever()

    await until(lambda: len(notices(parent, NOTICE_SETTLED)) == 1 and not parent.running)
    job = ctx.jobs.start(parent, "loop", forever)
    assert len(ctx.agents) == 4
    children = registry(ctx).live()
    await parent.aclose()
    assert job.status == "killed"
    assert registry(ctx).live() == []
    assert ctx.agents.list() == []
    assert runtime.live_runs() == []
    assert other_tasks() <= before
    # drained children stay resumable from their sessions
    assert sorted(c.status for c in children) == ["idle", "idle", "settled"]
    assert all(c.agent is None and not c.draining for c in children)
    assert len(notices(parent, NOTICE_SETTLED)) == 1  # draining sends none
    revived = ctx.agents.resume(parent.id, model=story.model())
    await revived.run("send wake up")
    assert results(revived)[-1][2]["delivery"] == "resumed"
    await until(lambda: quiet(ctx))


async def test_list_agents_descendants_and_a_corrupt_session_gets_a_diagnostic(
    ctx: Context, tmp_path: Path
) -> None:
    story = Story()
    parent, child_id = await start_child(ctx, story, "spawn done")
    await until(lambda: quiet(ctx) and any(r.parent_id == child_id for r in registry(ctx).live()))
    await until(lambda: quiet(ctx))
    await parent.run("list descendants")
    _, _, data = results(parent)[-1]
    assert [(a["parent_id"], a["status"]) for a in data["agents"]] == [
        (parent.id, "settled"),
        (child_id, "settled"),
    ]
    await parent.run("list")
    text, _, data = results(parent)[-1]
    assert len(data["agents"]) == 1
    assert text.startswith(f'- {child_id} "worker" (spawn, depth 1): settled, 1 turn finished')
    # drain the child, then corrupt its file: listing reports it instead of failing
    grandchild_id = next(r.id for r in registry(ctx).live() if r.parent_id == child_id)
    await registry(ctx).drain_children_of(parent.id)
    path = tmp_path / f"{child_id}.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    await parent.run("list descendants")
    text, is_error, data = results(parent)[-1]
    assert not is_error
    (entry,) = data["agents"]  # its own children cannot be read through it
    assert entry["agent_id"] == child_id
    assert entry["status"] == "failed"
    assert "line 3 is not a JSON object (corrupt session file)" in entry["diagnostic"]
    assert "diagnostic: subagent" in text
    assert grandchild_id not in text
    await parent.run("send are you there")
    text, is_error, data = results(parent)[-1]
    assert is_error
    assert data == {"code": "NOT_RESUMABLE"}
    assert text.startswith(f'send_message refused: subagent "{child_id}" cannot be resumed:')


async def test_interrupting_a_waiting_child_is_not_an_error(ctx: Context) -> None:
    story = Story()
    parent, child_id = await start_child(ctx, story, "quick")
    await until(lambda: quiet(ctx))
    await parent.run("stop")
    text, is_error, data = results(parent)[-1]
    assert not is_error
    assert text == (f"Subagent {child_id} was not running (status settled); nothing to interrupt.")
    assert data["interrupted"] is False
