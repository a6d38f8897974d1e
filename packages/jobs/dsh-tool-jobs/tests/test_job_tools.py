"""job_output / job_list / job_kill through the real plugin loader and agent loop."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dsh.core import (
    AbortSignal,
    Agent,
    Context,
    DshError,
    ModelRequest,
    ScriptedReply,
    ToolContext,
    text_of,
)
from dsh.core.jobs import JobOutcome
from dsh.testing.fixtures import plugin_rows, scripted_context
from dsh.testing.scripting import call, model, steps_in_turn
from dsh.tool_jobs import JobAccessError, owned_job

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    """A context on the scripted model with dsh-tool-jobs loaded."""
    async with scripted_context(plugins=plugin_rows("dsh-tool-jobs")) as ctx:
        yield ctx


def calling(name: str, **arguments: Any) -> Any:
    """A model whose turn calls one tool, then ends with the tool's text."""

    def script(request: ModelRequest) -> ScriptedReply:
        if steps_in_turn(request) == 0:
            return ScriptedReply(tool_calls=[call(name, **arguments)])
        return ScriptedReply(text="{tool_results}")

    return model(script)


def results(agent: Agent) -> list[tuple[str, bool, Any]]:
    return [
        (text_of(e.data["content"]), bool(e.data["is_error"]), e.data.get("data"))
        for e in agent.session.events
        if e.type == "tool/result"
    ]


def notices(agent: Agent) -> list[str]:
    return [
        text_of(e.data["content"])
        for e in agent.session.events
        if e.type == "user/message" and e.data.get("kind") == "notice"
    ]


async def after(delay: float, output: str) -> JobOutcome:
    await anyio.sleep(delay)
    return JobOutcome(output=output)


async def invoke(ctx: Context, agent: Agent, name: str, signal: AbortSignal, **args: Any) -> Any:
    tool = ctx.tools.get(name)
    assert tool is not None
    return await tool.invoke(args, ToolContext(agent, "call-1", signal))


async def test_the_plugin_registers_three_tools_and_unloads_cleanly(ctx: Context) -> None:
    assert {"job_output", "job_list", "job_kill"} <= set(ctx.tools.names())
    spec = ctx.tools.get("job_output")
    assert spec is not None
    assert set(spec.spec.parameters["properties"]) == {"job_id", "wait", "timeout_ms"}
    await ctx.plugins.unload("dsh-tool-jobs")
    assert not {"job_output", "job_list", "job_kill"} & set(ctx.tools.names())


async def test_job_output_waits_for_the_outcome(ctx: Context) -> None:
    owner = ctx.agents.create(model=calling("job_output", job_id="work-1", wait=True))
    ctx.jobs.start(owner, "work", lambda s: after(0.05, "forty-two"), description="answer")
    await owner.run("collect it")
    ((text, is_error, data),) = results(owner)
    assert not is_error
    assert text.startswith("job work-1 (work) completed after")
    assert "Description: answer\nOutput:\nforty-two" in text
    assert data["status"] == "completed"
    assert data["output"] == "forty-two"
    await owner.when_idle()
    assert len(notices(owner)) == 1  # the completion notice, exactly once


async def test_job_output_without_wait_and_with_a_timeout_reports_running(ctx: Context) -> None:
    owner = ctx.agents.create()
    gate = anyio.Event()

    async def held(signal: AbortSignal) -> JobOutcome:
        await gate.wait()
        return JobOutcome(output="done")

    job = ctx.jobs.start(owner, "work", held)
    signal = AbortSignal()
    now = await invoke(ctx, owner, "job_output", signal, job_id=job.id)
    assert "is running" in text_of(now.blocks())
    assert "Call job_output with wait=true" in text_of(now.blocks())
    started = time.monotonic()
    waited = await invoke(ctx, owner, "job_output", signal, job_id=job.id, wait=True, timeout_ms=50)
    assert 0.04 < time.monotonic() - started < 1
    assert "Still running after waiting 50 ms" in text_of(waited.blocks())
    gate.set()
    await job.wait(2)


async def test_job_output_wait_honours_the_tool_calls_signal(ctx: Context) -> None:
    owner = ctx.agents.create()

    async def forever(signal: AbortSignal) -> JobOutcome:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    job = ctx.jobs.start(owner, "loop", forever)
    signal = AbortSignal()

    async def abort_soon() -> None:
        await anyio.sleep(0.05)
        signal.abort("turn cancelled")

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(abort_soon)
        result = await invoke(ctx, owner, "job_output", signal, job_id=job.id, wait=True)
    assert time.monotonic() - started < 2  # not the 30 s default timeout
    assert "Stopped waiting: turn cancelled." in text_of(result.blocks())
    assert job.status == "running"
    ctx.jobs.kill(job.id, notify=False)
    await job.wait(2)


async def test_job_kill_stops_the_job_waits_until_it_ended_and_sends_no_notice(
    ctx: Context,
) -> None:
    owner = ctx.agents.create(model=calling("job_kill", job_id="loop-1", reason="not needed"))
    cleaned = anyio.Event()

    async def forever(signal: AbortSignal) -> JobOutcome:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.05)  # slow cleanup: job_kill must wait for it
            cleaned.set()
        raise AssertionError("unreachable")

    job = ctx.jobs.start(owner, "loop", forever, description="spin")
    seen_at_result: list[bool] = []
    owner.observe(
        lambda e: seen_at_result.append(cleaned.is_set()) if e.type == "tool/result" else None
    )
    await owner.run("stop it")
    assert seen_at_result == [True]  # ended before the result was written
    ((text, is_error, data),) = results(owner)
    assert not is_error
    assert text.startswith("job loop-1 (loop) killed after")
    assert "Stopped because: not needed" in text
    assert data["status"] == "killed"
    assert job.status == "killed"
    await anyio.sleep(0.02)
    assert notices(owner) == []
    again = await invoke(ctx, owner, "job_kill", AbortSignal(), job_id="loop-1")
    assert text_of(again.blocks()).startswith("job loop-1 had already killed; nothing to stop.")


async def test_an_agent_cannot_see_or_kill_another_agents_job(ctx: Context) -> None:
    owner = ctx.agents.create()
    stranger = ctx.agents.create()

    async def forever(signal: AbortSignal) -> JobOutcome:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    job = ctx.jobs.start(owner, "loop", forever)
    ctx.jobs.start(stranger, "mine", lambda s: after(0, "x"))
    signal = AbortSignal()
    for name, args in (("job_output", {}), ("job_kill", {"reason": "hostile"})):
        result = await invoke(ctx, stranger, name, signal, job_id=job.id, **args)
        assert result.is_error
        assert text_of(result.blocks()) == (
            'job "loop-1" is not one of your jobs (yours: mine-1); an agent can only see'
            " and stop its own jobs"
        )
    assert job.status == "running"
    listed = await invoke(ctx, stranger, "job_list", signal)
    assert [j["job_id"] for j in listed.data["jobs"]] == ["mine-1"]
    mine = await invoke(ctx, owner, "job_list", signal)
    assert text_of(mine.blocks()) == "loop-1 (loop) running"
    ctx.jobs.kill(job.id, notify=False)
    await job.wait(2)


async def test_job_list_with_no_jobs(ctx: Context) -> None:
    owner = ctx.agents.create()
    result = await invoke(ctx, owner, "job_list", AbortSignal())
    assert text_of(result.blocks()) == "You have no jobs."


async def test_a_job_that_is_not_yours_is_a_dsh_error_and_a_lookup_error(ctx: Context) -> None:
    agent = ctx.agents.create()
    with pytest.raises(DshError) as info:
        owned_job(agent, "no-such-job")
    assert isinstance(info.value, JobAccessError)
    assert isinstance(info.value, LookupError)  # callers that catch LookupError still do
    assert '"no-such-job" is not one of your jobs' in str(info.value)
