"""ctx.jobs with the real agent loop: notices, the cap, kill, owner disposal; and the
agent fixes jobs need (a notice arriving at a turn's last step, close hooks, resume)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import anyio
import pytest

from dsh.core import (
    AbortSignal,
    Agent,
    Context,
    ModelRequest,
    ScriptedAdapter,
    ScriptedReply,
    SessionStore,
    parse_preset,
    text_of,
)
from dsh.core._llm import BoundModel
from dsh.core.agents import PromptSections
from dsh.core.jobs import MAX_RUNNING_PER_OWNER, JobError, JobOutcome

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]

PRESET = parse_preset('[agent.model]\nadapter = "scripted"\n')


def notices(agent: Agent) -> list[dict[str, object]]:
    return [
        dict(e.data)
        for e in agent.session.events
        if e.type == "user/message" and e.data.get("kind") == "notice"
    ]


def other_tasks() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def finish_after(delay: float, output: str = "job output") -> JobOutcome:
    await anyio.sleep(delay)
    return JobOutcome(output=output)


async def test_a_job_that_completes_notifies_its_idle_owner_exactly_once() -> None:
    async with Context.open(PRESET) as ctx:
        owner = ctx.agents.create()
        job = ctx.jobs.start(owner, "work", lambda s: finish_after(0.01), description="count")
        assert job.id == "work-1"
        assert job.status == "running"
        assert await job.wait(2)
        assert job.status == "completed"
        with anyio.fail_after(2):
            while not owner.turns:
                await anyio.sleep(0.001)
            await owner.when_idle()
        (notice,) = notices(owner)
        assert notice["source"] == {"type": "job", "job_id": "work-1", "status": "completed"}
        text = text_of(notice["content"])  # type: ignore[arg-type]
        assert text.startswith("[runtime notice] job work-1 (work) completed after")
        assert "Description: count" in text
        assert "Output:\njob output" in text
        await anyio.sleep(0.05)
        assert len(notices(owner)) == 1
        assert ctx.jobs.start(owner, "work", lambda s: finish_after(0)).id == "work-2"


async def test_a_notice_arriving_during_the_last_step_starts_the_next_turn() -> None:
    """The turn has no next step to deliver it to: it must not wait for a future turn."""
    async with Context.open(PRESET) as ctx:
        owner = ctx.agents.create(
            model=BoundModel(ScriptedAdapter([ScriptedReply(text="thinking", delay=0.2)]))
        )
        owner.followup("go")
        with anyio.fail_after(2):
            while not owner.session.events or owner.session.events[-1].type != "turn/start":
                await anyio.sleep(0.001)
        ctx.jobs.start(owner, "work", lambda s: finish_after(0.02))
        owner.steer("also this")
        with anyio.fail_after(3):
            await owner.when_idle()
        ends = [e.data["stop_reason"] for e in owner.session.events if e.type == "turn/end"]
        assert ends == ["completed", "completed"]
        users = [
            (e.data.get("kind"), text_of(e.data["content"]))
            for e in owner.session.events
            if e.type == "user/message"
        ]
        # the steer arrived first and opens turn 2; the notice is delivered at its first step
        assert [kind for kind, _ in users] == [None, "steer", "notice"]
        assert [e.type for e in owner.session.events] == [
            "user/message",
            "turn/start",
            "assistant/message",
            "turn/end",
            "user/message",
            "turn/start",
            "user/message",
            "assistant/message",
            "turn/end",
        ]


async def test_an_inject_during_the_last_step_adds_context_without_a_turn() -> None:
    async with Context.open(PRESET) as ctx:
        owner = ctx.agents.create(
            model=BoundModel(ScriptedAdapter([ScriptedReply(text="ok", delay=0.05)]))
        )
        owner.followup("go")
        await anyio.sleep(0.01)
        owner.inject("background fact")
        await owner.when_idle()
        assert owner.turns == 1
        assert owner.session.events[-1].type == "user/message"
        assert owner.session.events[-1].data["kind"] == "inject"


async def test_the_cap_is_ten_running_jobs_per_owner_with_a_clear_error() -> None:
    async with Context.open(PRESET) as ctx:
        owner = ctx.agents.create(label="lead")
        other = ctx.agents.create()
        gate = anyio.Event()

        async def held(signal: AbortSignal) -> JobOutcome:
            await gate.wait()
            return JobOutcome(output="released")

        jobs = [ctx.jobs.start(owner, "hold", held) for _ in range(MAX_RUNNING_PER_OWNER)]
        with pytest.raises(JobError) as info:
            ctx.jobs.start(owner, "hold", held)
        assert str(info.value) == (
            "agent lead already has 10 running jobs (the limit is 10); wait for one with"
            " job_output or stop one with job_kill"
        )
        assert ctx.jobs.start(other, "hold", held).id == "hold-11"  # the cap is per owner
        ctx.jobs.kill(jobs[0].id, "make room", notify=False)
        await jobs[0].wait(2)
        assert ctx.jobs.start(owner, "hold", held).id == "hold-12"
        gate.set()


async def test_kill_stops_the_job_and_only_a_notify_kill_sends_a_notice() -> None:
    async with Context.open(PRESET) as ctx:
        owner = ctx.agents.create()
        stopped: list[str] = []

        async def forever(signal: AbortSignal) -> JobOutcome:
            try:
                await anyio.sleep_forever()
            finally:
                stopped.append(signal.reason or "?")
            raise AssertionError("unreachable")

        quiet = ctx.jobs.start(owner, "loop", forever)
        loud = ctx.jobs.start(owner, "loop", forever)
        ctx.jobs.kill(quiet.id, "owner asked", notify=False)
        assert quiet.status == "stopping"
        await quiet.wait(2)
        assert quiet.status == "killed"
        assert quiet.outcome is not None
        assert quiet.outcome.diagnostic == "owner asked"
        ctx.jobs.kill(loud.id, "budget exceeded")
        await loud.wait(2)
        assert stopped == ["owner asked", "budget exceeded"]
        with anyio.fail_after(2):
            while not owner.turns:
                await anyio.sleep(0.001)
            await owner.when_idle()
        (notice,) = notices(owner)
        text = text_of(notice["content"])  # type: ignore[arg-type]
        assert text.startswith("[runtime notice] job loop-2 (loop) killed after")
        assert "Stopped because: budget exceeded" in text


async def test_outcomes_map_to_statuses() -> None:
    async with Context.open(PRESET) as ctx:
        owner = ctx.agents.create(persist=False)

        async def fail(signal: AbortSignal) -> JobOutcome:
            raise ValueError("bad input")

        async def killed_elsewhere(signal: AbortSignal) -> JobOutcome:
            return JobOutcome(output="partial", killed=True, diagnostic="child aborted")

        async def failed(signal: AbortSignal) -> JobOutcome:
            return JobOutcome(output="headline", failed=True, diagnostic="why")

        raised = ctx.jobs.start(owner, "a", fail)
        aborted = ctx.jobs.start(owner, "b", killed_elsewhere)
        reported = ctx.jobs.start(owner, "c", failed)
        for job in (raised, aborted, reported):
            await job.wait(2)
        assert (raised.status, aborted.status, reported.status) == ("failed", "killed", "failed")
        assert raised.outcome is not None
        assert raised.outcome.diagnostic == "ValueError: bad input"
        await owner.aclose()


async def test_closing_the_owner_kills_its_jobs_without_notices_and_leaves_no_task() -> None:
    async with Context.open(PRESET) as ctx:
        before = other_tasks()
        owner = ctx.agents.create()
        survivor = ctx.agents.create()

        async def forever(signal: AbortSignal) -> JobOutcome:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        mine = [ctx.jobs.start(owner, "loop", forever) for _ in range(3)]
        theirs = ctx.jobs.start(survivor, "loop", forever)
        await anyio.sleep(0.01)
        await owner.aclose()
        assert [j.status for j in mine] == ["killed"] * 3
        assert all(j.kill_reason == "agent closed" for j in mine)
        assert theirs.status == "running"
        ctx.jobs.kill(theirs.id, notify=False)
        await theirs.wait(2)
        await anyio.sleep(0.01)
        assert other_tasks() <= before
        assert notices(survivor) == []
        with pytest.raises(JobError, match="is closed and cannot start jobs"):
            ctx.jobs.start(owner, "loop", forever)


async def test_jobs_killed_by_context_close_start_no_turn() -> None:
    replies: list[str] = []

    def script(request: ModelRequest) -> ScriptedReply:
        replies.append("called")
        return ScriptedReply(text="noted")

    async with Context.open(PRESET) as ctx:
        owner = ctx.agents.create(model=BoundModel(ScriptedAdapter(script)))

        async def forever(signal: AbortSignal) -> JobOutcome:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        job = ctx.jobs.start(owner, "loop", forever)
        await anyio.sleep(0.01)
    assert job.status == "killed"
    assert replies == []
    assert notices(owner) == []


async def test_close_hooks_run_shielded_after_the_turn_and_jobs_stopped() -> None:
    async with Context.open(PRESET) as ctx:
        agent = ctx.agents.create(model=BoundModel(ScriptedAdapter([ScriptedReply(hang=True)])))
        order: list[str] = []

        async def first() -> None:
            order.append(f"first (running={agent.running})")
            await anyio.sleep(0.01)

        async def second() -> None:
            order.append("second")

        async def removed() -> None:
            order.append("removed")

        agent.on_close(first)
        agent.on_close(second)
        agent.on_close(removed)()
        agent.followup("go")
        await anyio.sleep(0.01)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await agent.aclose()  # shielded: completes inside a cancelled scope
        assert order == ["second", "first (running=False)"]
        assert agent.closed
        assert ctx.agents.get(agent.id) is None


async def test_resume_closes_a_turn_cut_off_by_a_crash_and_takes_prompt_and_steps(
    tmp_path: Path,
) -> None:
    async with Context.open(PRESET, sessions_dir=tmp_path) as ctx:
        agent = ctx.agents.create(model=BoundModel(ScriptedAdapter([ScriptedReply(hang=True)])))
        agent.followup("first")
        await anyio.sleep(0.01)
        agent_id = agent.id
        # simulate a crash: the file has turn/start but never gets its turn/end
        crashed = (tmp_path / f"{agent_id}.jsonl").read_text()
    (tmp_path / f"{agent_id}.jsonl").write_text(crashed)
    assert '"turn/end"' not in crashed
    async with Context.open(PRESET, sessions_dir=tmp_path) as ctx:
        prompt = PromptSections()
        prompt.set("persona", "You are the resumed one.")
        agent = ctx.agents.resume(agent_id, prompt=prompt, max_steps=7)
        assert agent.max_steps == 7
        assert agent.prompt.render() == "You are the resumed one."
        end = agent.session.events[-1]
        assert end.type == "turn/end"
        assert end.data == {
            "turn": 1,
            "stop_reason": "aborted",
            "error": "the process stopped before this turn ended",
        }
        outcome = await agent.run("second")
        assert outcome.turn == 2
    lines = [json.loads(line) for line in (tmp_path / f"{agent_id}.jsonl").read_text().splitlines()]
    assert [line.get("type") for line in lines[1:]][-4:] == [
        "user/message",
        "turn/start",
        "assistant/message",
        "turn/end",
    ]
    assert SessionStore(tmp_path).load(agent_id).torn_tail is None


async def test_a_notice_does_not_wake_an_agent_paused_by_cancel() -> None:
    async with Context.open(PRESET) as ctx:
        owner = ctx.agents.create(model=BoundModel(ScriptedAdapter([ScriptedReply(hang=True)])))
        owner.followup("work")
        owner.followup("kept")
        await anyio.sleep(0.01)
        owner.cancel("user pressed escape")
        await owner.when_idle()
        job = ctx.jobs.start(owner, "work", lambda s: finish_after(0))
        await job.wait(2)
        await anyio.sleep(0.02)
        assert not owner.running
        assert owner.queued == 2  # the kept followup, then the notice
        owner.model = BoundModel(ScriptedAdapter([ScriptedReply(text="ok")]))
        owner.resume()
        await owner.when_idle()
        assert [e.data["stop_reason"] for e in owner.session.events if e.type == "turn/end"] == [
            "aborted",
            "completed",
            "completed",
        ]
        assert len(notices(owner)) == 1
