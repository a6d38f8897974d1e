"""Budgets through Temporal: the remainder travels in the workflow input to ``dsh
worker``, whose child (spawn, on the fake OpenAI-compatible server: a model that never
stops calling tools, 100 tokens a call) runs its tree under it. The child stops at its
cap, the delegation settles ``budget`` with the cap's diagnostic, what it spent counts
against the parent's budgets, and nothing is left: the workflow is closed and the
worker has no child process. A retried attempt runs under what the attempt before it
left. A temporal row whose inner provider cannot enforce a budget refuses one before
anything starts."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import (
    Budget,
    SubagentResult,
    SubagentRuntime,
    SubagentStartRequest,
    UnsupportedCapability,
)
from dsh.testing.model_servers import (
    ChatReply,
    ChatToolCall,
    Hang,
    OpenAIChatServer,
    StreamFaults,
)
from dsh.testing.processes import cmdline, descendants, live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PER_CALL = {"prompt_tokens": 90, "completion_tokens": 10}
"""100 tokens a model call."""


def looping(delay: float = 0.0) -> ChatReply:
    """A reply that calls the shell again (the loop never ends on its own)."""
    return ChatReply(
        text="checking",
        tool_calls=[ChatToolCall("shell", {"command": "sleep 0.05"})],
        usage=PER_CALL,
        faults=StreamFaults(delay=delay),
    )


def worker_preset(path: Path, base_url: str) -> Path:
    """The standard tools and spawn children on the fake server; the shell allowed."""
    path.write_text(
        'extends = "standard"\n\n[agent.model]\nadapter = "openai"\nmodel = "fake-model"\n'
        f'options = {{ base_url = "{base_url}", api_key_env = "" }}\n\n'
        '[permissions.tools]\nshell = "allow"\n',
        encoding="utf-8",
    )
    return path


def _tree(worker_pid: int) -> set[int]:
    """The worker's descendants, its dsh watchdog excepted."""
    return {pid for pid in descendants(worker_pid) if "dsh-watchdog" not in cmdline(pid)}


async def no_tree(worker_pid: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while _tree(worker_pid):
        assert time.monotonic() < deadline, f"left running: {sorted(_tree(worker_pid))}"
        await asyncio.sleep(0.1)


async def closed(address: str, workflow_id: str, within: float = 15.0) -> str:
    """The workflow's status once it is no longer running."""
    from temporalio.client import Client, WorkflowExecutionStatus

    client = await Client.connect(address)
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + within
    while True:
        description = await handle.describe()
        if description.status != WorkflowExecutionStatus.RUNNING:
            assert description.status is not None
            return description.status.name
        assert time.monotonic() < deadline, f"{workflow_id} still runs after {within} s"
        await asyncio.sleep(0.2)


@pytest.fixture
def model() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer(default=looping()) as server:
        yield server


@pytest.fixture
def budget_worker(tk: Any, server: Any, model: OpenAIChatServer, tmp_path: Path) -> Iterator[Any]:
    preset = worker_preset(tmp_path / "worker.toml", model.api_base)
    queue = f"budget-{tmp_path.name}"
    worker = tk.WorkerProcess(
        tk.worker_args(server, queue, preset, None, "--cwd", str(tmp_path)), "budget-w"
    )
    worker.queue = queue
    try:
        yield worker
    finally:
        worker.stop()


async def _run(ctx: Any, name: str, request: SubagentStartRequest) -> tuple[str, SubagentResult]:
    run = await SubagentRuntime.of(ctx).start(name, request)
    async with run:
        result = await asyncio.wait_for(run.result, 60)
    return run.id, result


async def test_a_token_cap_stops_the_child_on_the_worker(
    tk: Any, server: Any, model: OpenAIChatServer, budget_worker: Any, tmp_path: Path
) -> None:
    """500 tokens: the worker's child stops after its fifth call (a sixth may be in
    flight), the run settles ``budget`` with the cap's diagnostic, and nothing is left."""
    config = tk.provider_config(server, budget_worker.queue, journal="off")
    before = live_children()
    async with tk.parent_context(config, tmp_path) as (ctx, provider):
        parent = ctx.agents.create()
        request = SubagentStartRequest(
            "loop", parent, AbortSignal(), budget=Budget(tokens=500, seconds=60)
        )
        run_id, result = await _run(ctx, provider.name, request)
    assert result.stop_reason == "budget", result
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("token budget 500 reached: "), result.diagnostic
    calls = len(model.requests)
    assert 5 <= calls <= 5 + 1, calls  # 100 tokens a call: the cap, plus one in flight
    assert result.usage.input_tokens + result.usage.output_tokens == 100 * calls
    assert await closed(server.address, run_id) == "COMPLETED"
    await no_tree(budget_worker.pid)
    assert live_children() == before


async def test_a_time_cap_stops_a_child_waiting_on_its_model(
    tk: Any, server: Any, model: OpenAIChatServer, budget_worker: Any, tmp_path: Path
) -> None:
    """The model never answers: the 3 s cap stops the child (the worker's meter, and
    the parent's timer behind it) and the run settles ``budget`` soon after."""
    model.script(Hang())
    config = tk.provider_config(server, budget_worker.queue, journal="off")
    async with tk.parent_context(config, tmp_path) as (ctx, provider):
        parent = ctx.agents.create()
        request = SubagentStartRequest("wait", parent, AbortSignal(), budget=Budget(seconds=3))
        started = time.monotonic()
        run_id, result = await _run(ctx, provider.name, request)
        took = time.monotonic() - started
    assert result.stop_reason == "budget", result
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("time budget 3 s reached: "), result.diagnostic
    assert 3 <= took < 3 + tk.HEARTBEAT_TIMEOUT + 2, took
    assert len(model.requests) == 1
    assert await closed(server.address, run_id) == "COMPLETED"
    await no_tree(budget_worker.pid)


async def test_a_budgeted_tree_sends_its_remainder_and_is_charged(
    tk: Any, server: Any, model: OpenAIChatServer, budget_worker: Any, tmp_path: Path
) -> None:
    """No budget on the request: the parent's tree budget (300 tokens) is the child's;
    what the child spent is charged to the parent's meter when it settles."""
    config = tk.provider_config(server, budget_worker.queue, journal="off")
    async with tk.parent_context(config, tmp_path) as (ctx, provider):
        parent = ctx.agents.create()
        runtime = SubagentRuntime.of(ctx)
        lift = runtime.budget_tree(parent, Budget(tokens=300, children=4))
        try:
            run_id, result = await _run(
                ctx, provider.name, SubagentStartRequest("loop", parent, AbortSignal())
            )
            meter = runtime.budget_meter(parent)
            assert meter is not None
            spent = meter.spent()
        finally:
            lift()
    assert result.stop_reason == "budget", result
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("token budget 300 reached: "), result.diagnostic
    calls = len(model.requests)
    assert 3 <= calls <= 3 + 1, calls
    assert spent["tokens"] == 100 * calls  # the child's spend, counted above
    assert spent["children"] == 1
    assert await closed(server.address, run_id) == "COMPLETED"
    await no_tree(budget_worker.pid)


async def test_an_inner_provider_without_the_budget_capability_is_refused(
    tk: Any, tmp_path: Path
) -> None:
    """A row whose inner provider is not known to enforce a budget (``acp``, without
    ``budget`` in ``capabilities``): refused at start, on the request and from inside a
    budgeted tree, before anything is started (no server listens at its address: a
    start that got as far as connecting would fail ``START_FAILED`` instead)."""
    config = tk.TemporalProviderConfig(
        address=f"127.0.0.1:{tk.free_port()}", provider="acp", journal="off"
    )
    async with tk.parent_context(config, tmp_path) as (ctx, provider):
        assert not provider.capabilities.budget
        parent = ctx.agents.create()
        runtime = SubagentRuntime.of(ctx)
        budgeted = SubagentStartRequest("hi", parent, AbortSignal(), budget=Budget(tokens=10))
        with pytest.raises(UnsupportedCapability, match='"budget" capability'):
            await runtime.start(provider.name, budgeted)
        lift = runtime.budget_tree(parent, Budget(tokens=100))
        try:
            with pytest.raises(UnsupportedCapability, match='"budget" capability'):
                await runtime.start(
                    provider.name, SubagentStartRequest("hi", parent, AbortSignal())
                )
        finally:
            lift()


async def completed_outcomes(address: str, workflow_id: str) -> list[dict[str, Any]]:
    """The delegation outcomes its activities completed with (from the history)."""
    import json

    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    client = await Client.connect(address)
    outcomes = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payload = event.activity_task_completed_event_attributes.result.payloads[0]
            outcomes.append(json.loads(payload.data))
    return outcomes


async def test_a_retried_attempt_gets_what_the_lost_one_left(
    tk: Any, server: Any, tmp_path: Path
) -> None:
    """Worker A is SIGKILLed during its third model call (each call about 1.7 s long,
    heartbeats every 0.25 s: the first call, and maybe the second, is in the heartbeat
    the server kept); attempt 2 on worker B runs under the 500 tokens less what attempt
    1 reported, stops at that cap, and the result's usage counts both. (With the full
    500 again attempt 2 would make 5 calls and say "token budget 500".)"""
    with OpenAIChatServer(default=looping(delay=0.25)) as model:
        preset = worker_preset(tmp_path / "worker.toml", model.api_base)
        queue = f"budget-retry-{tmp_path.name}"
        args = tk.worker_args(server, queue, preset, None, "--cwd", str(tmp_path))
        first = tk.WorkerProcess(args, "budget-a")
        second = None
        config = tk.provider_config(server, queue, journal="off")
        try:
            async with tk.parent_context(config, tmp_path) as (ctx, provider):
                parent = ctx.agents.create()
                request = SubagentStartRequest(
                    "loop", parent, AbortSignal(), budget=Budget(tokens=500, seconds=90)
                )
                run = await SubagentRuntime.of(ctx).start(provider.name, request)
                async with run:
                    deadline = time.monotonic() + 30
                    while len(model.requests) < 3:
                        assert time.monotonic() < deadline, "attempt 1 never made 3 calls"
                        await asyncio.sleep(0.05)
                    await asyncio.to_thread(first.kill)
                    lost = len(model.requests)
                    second = tk.WorkerProcess(args, "budget-b")
                    result = await asyncio.wait_for(run.result, 60)
            calls = len(model.requests)
            outcomes = await completed_outcomes(server.address, run.id)
            await no_tree(second.pid)
        finally:
            first.kill()
            if second is not None:
                second.stop()
    assert result.stop_reason == "budget", result
    assert [(o["attempt"], o["worker"], o["stop_reason"]) for o in outcomes] == [
        (2, "budget-b", "budget")
    ]
    assert lost == 3
    # attempt 2's cap: what attempt 1's last heartbeat left of the 500 (1 or 2 calls)
    assert result.diagnostic is not None
    found = re.match(r"token budget (\d+) reached: ", result.diagnostic)
    assert found is not None, result.diagnostic
    cap = int(found.group(1))
    assert cap in (300, 400), result.diagnostic
    assert cap // 100 <= calls - lost <= cap // 100 + 1, (lost, calls, cap)
    # the result's usage counts attempt 1's reported calls too: the whole 500
    assert result.usage.input_tokens + result.usage.output_tokens == 500, result.usage
