"""run_in_background: the one-shot run as a ``subagent`` job (real runtime, real jobs,
real tool; the child is the scripted provider or an in-process agent on a scripted model)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dsh.core import (
    Agent,
    Context,
    ModelRequest,
    ScriptedReply,
    text_of,
)
from dsh.subagent import ALL_START_CAPABILITIES, SubagentResult, SubagentRuntime
from dsh.subagent_spawn_in_process import provider as spawn_provider
from dsh.testing.fixtures import last_user_kind, plugin_rows, scripted_context
from dsh.testing.scripted_provider import ScriptedProvider
from dsh.testing.scripting import call, last_user_text, model, steps_in_turn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    """The parent's context: the scripted model and dsh-tool-jobs (background runs are
    jobs)."""
    async with scripted_context(plugins=plugin_rows("dsh-tool-jobs")) as ctx:
        yield ctx


async def load_tool(ctx: Context, provider: str = "scripted", **config: Any) -> None:
    await ctx.plugins.load(
        "dsh-tool-subagent",
        {"provider": provider, "enable_run_in_background": True, **config},
        id="subagent",
    )


def parent_model(prompt: str = "find the bug", *, background: bool = True) -> Any:
    """Delegates in the background on a user message; acknowledges notices."""

    def script(request: ModelRequest) -> ScriptedReply:
        if last_user_kind(request) == "notice":
            return ScriptedReply(text="noted")
        if steps_in_turn(request) == 0:
            return ScriptedReply(
                tool_calls=[
                    call(
                        "subagent",
                        description="look",
                        prompt=prompt,
                        run_in_background=background,
                    )
                ]
            )
        return ScriptedReply(text="started: {tool_results}")

    return model(script)


def tool_results(agent: Agent) -> list[tuple[str, bool, Any]]:
    return [
        (text_of(e.data["content"]), bool(e.data["is_error"]), e.data.get("data"))
        for e in agent.session.events
        if e.type == "tool/result"
    ]


def notices(agent: Agent) -> list[dict[str, Any]]:
    return [
        dict(e.data)
        for e in agent.session.events
        if e.type == "user/message" and e.data.get("kind") == "notice"
    ]


async def wait_until(predicate: Any, timeout: float = 3) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.002)


async def test_background_job_completes_after_the_turn_and_notifies_exactly_once(
    ctx: Context,
) -> None:
    gate = anyio.Event()
    provider = ScriptedProvider(
        "scripted", reply="the bug is on line 3", capabilities=ALL_START_CAPABILITIES, gate=gate
    )
    SubagentRuntime.of(ctx).register_provider(provider)
    await load_tool(ctx)
    parent = ctx.agents.create(model=parent_model())
    outcome = await parent.run("go")
    assert outcome.stop_reason == "completed"
    ((text, is_error, data),) = tool_results(parent)
    assert not is_error
    assert text.startswith("Started background job subagent-1 (subagent run scripted-")
    job = ctx.jobs.get(data["job_id"])
    assert job is not None
    assert job.status == "running"  # the turn ended, the job did not
    (request,) = provider.starts
    assert not request.signal.aborted  # detached from the tool call's signal
    gate.set()
    assert await job.wait(2)
    assert job.status == "completed"
    await wait_until(lambda: parent.turns == 2 and not parent.running)
    (notice,) = notices(parent)
    assert notice["source"] == {"type": "job", "job_id": "subagent-1", "status": "completed"}
    text = text_of(notice["content"])
    assert text.startswith("[runtime notice] job subagent-1 (subagent) completed after")
    assert "Description: look\nOutput:\nthe bug is on line 3" in text
    assert provider.disposals == 1
    assert provider.live == 0
    await anyio.sleep(0.02)
    assert len(notices(parent)) == 1
    assert SubagentRuntime.of(ctx).live_runs() == []


OUTCOMES = [
    (SubagentResult("all good", "completed"), "completed", "all good"),
    (
        SubagentResult("half", "aborted", diagnostic="stopped"),
        "killed",
        "subagent run was cancelled\nDiagnostic: stopped\n"
        "Partial output before the run ended: half",
    ),
    (
        SubagentResult("", "error", diagnostic="model call failed: HTTP 500"),
        "failed",
        "subagent run failed\nDiagnostic: model call failed: HTTP 500",
    ),
    (
        SubagentResult("so far", "max-tokens"),
        "failed",
        "subagent run hit its token limit before finishing\n"
        "Partial output before the run ended: so far",
    ),
    (
        SubagentResult("", "refusal", diagnostic="policy"),
        "failed",
        "subagent declined the task\nDiagnostic: policy",
    ),
]


@pytest.mark.parametrize(("result", "status", "output"), OUTCOMES)
async def test_outcome_mapping_reuses_the_foreground_wording(
    ctx: Context, result: SubagentResult, status: str, output: str
) -> None:
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES, respond=lambda r: result)
    )
    await load_tool(ctx)
    parent = ctx.agents.create(model=parent_model())
    await parent.run("go")
    job = ctx.jobs.get("subagent-1")
    assert job is not None
    assert await job.wait(2)
    assert job.status == status
    assert job.outcome is not None
    assert job.outcome.output == output
    assert job.outcome.diagnostic == result.diagnostic
    assert job.outcome.data["stop_reason"] == result.stop_reason
    await wait_until(lambda: len(notices(parent)) == 1 and not parent.running)


async def test_dispose_failure_after_success_fails_the_job(ctx: Context) -> None:
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider(
            "scripted",
            reply="done",
            capabilities=ALL_START_CAPABILITIES,
            dispose_error=OSError("z"),
        )
    )
    await load_tool(ctx)
    parent = ctx.agents.create(model=parent_model())
    await parent.run("go")
    job = ctx.jobs.get("subagent-1")
    assert job is not None
    await job.wait(2)
    assert job.status == "failed"
    assert job.outcome is not None
    assert job.outcome.output == "done\n\nWarning: cleanup of the subagent failed: OSError: z"
    await wait_until(lambda: not parent.running)


async def test_start_refusals_come_back_at_once_and_start_no_job(ctx: Context) -> None:
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES)
    )
    await load_tool(ctx, max_depth=0)
    parent = ctx.agents.create(model=parent_model())
    await parent.run("go")
    ((text, is_error, data),) = tool_results(parent)
    assert is_error
    assert text == "subagent could not start: subagent depth 1 exceeds max_depth 0"
    assert data == {"code": "DEPTH_EXCEEDED"}
    assert ctx.jobs.list() == []


async def test_the_eleventh_background_run_is_refused_before_starting(ctx: Context) -> None:
    gate = anyio.Event()
    provider = ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES, gate=gate)
    SubagentRuntime.of(ctx).register_provider(provider)
    await load_tool(ctx)

    def script(request: ModelRequest) -> ScriptedReply:
        if last_user_kind(request) == "notice":
            return ScriptedReply(text="noted")
        if steps_in_turn(request) == 0:
            calls = [
                call("subagent", description=f"task {n}", prompt="p", run_in_background=True)
                for n in range(11)
            ]
            return ScriptedReply(tool_calls=calls)
        return ScriptedReply(text="ok")

    parent = ctx.agents.create(model=model(script), label="lead")
    await parent.run("go")
    results = tool_results(parent)
    assert [is_error for _, is_error, _ in results] == [False] * 10 + [True]
    assert results[-1][0] == (
        "subagent could not start: agent lead already has 10 running jobs (the limit is 10);"
        " wait for one with job_output or stop one with job_kill"
    )
    assert len(provider.starts) == 10
    gate.set()
    await wait_until(lambda: all(j.settled for j in ctx.jobs.list()))
    await wait_until(lambda: not parent.running)
    assert provider.live == 0


async def test_foreground_still_works_when_background_is_enabled(ctx: Context) -> None:
    SubagentRuntime.of(ctx).register_provider(
        ScriptedProvider("scripted", reply="inline", capabilities=ALL_START_CAPABILITIES)
    )
    await load_tool(ctx)
    tool = ctx.tools.get("subagent")
    assert tool is not None
    assert set(tool.spec.parameters["properties"]) == {"description", "prompt", "run_in_background"}
    assert "collect the result with job_output" in tool.spec.description
    parent = ctx.agents.create(model=parent_model(background=False))
    await parent.run("go")
    assert tool_results(parent)[0][0] == "inline"
    assert ctx.jobs.list() == []


async def test_job_kill_stops_an_in_process_child_and_leaves_nothing_running(
    ctx: Context,
) -> None:
    before = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(spawn_provider())
    await load_tool(ctx, provider="spawn")

    def script(request: ModelRequest) -> ScriptedReply:  # the child shares the parent's model
        text = last_user_text(request)
        step = steps_in_turn(request)
        if text == "hang":
            return ScriptedReply(hang=True)
        if text == "go" and step == 0:
            return ScriptedReply(
                tool_calls=[
                    call("subagent", description="d", prompt="hang", run_in_background=True)
                ]
            )
        if text == "stop it" and step == 0:
            return ScriptedReply(
                tool_calls=[call("job_kill", job_id="subagent-1", reason="enough")]
            )
        return ScriptedReply(text="{tool_results}")

    parent = ctx.agents.create(model=model(script))
    await parent.run("go")
    await wait_until(lambda: len(ctx.agents) == 2)
    (child,) = [a for a in ctx.agents.list() if a is not parent]
    await wait_until(lambda: child.running and child.turns == 1)
    await parent.run("stop it")
    text, is_error, data = tool_results(parent)[-1]
    assert not is_error
    assert text.startswith("job subagent-1 (subagent) killed after")
    assert "Stopped because: enough" in text
    assert data["status"] == "killed"
    # nothing left: the child agent is closed, the run disposed, no task running
    assert child.closed
    assert ctx.agents.list() == [parent]
    assert runtime.live_runs() == []
    assert [e.data["stop_reason"] for e in child.session.events if e.type == "turn/end"] == [
        "aborted"
    ]
    await parent.when_idle()
    assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} <= before
    assert notices(parent) == []


async def test_closing_the_parent_kills_its_background_runs(ctx: Context) -> None:
    provider = ScriptedProvider("scripted", capabilities=ALL_START_CAPABILITIES)
    SubagentRuntime.of(ctx).register_provider(provider)
    await load_tool(ctx)
    parent = ctx.agents.create(model=parent_model(prompt="hang"))
    await parent.run("go")
    job = ctx.jobs.get("subagent-1")
    assert job is not None
    assert provider.live == 1
    await parent.aclose()
    assert job.status == "killed"
    assert provider.live == 0
    assert provider.disposals == 1
    assert SubagentRuntime.of(ctx).live_runs() == []
