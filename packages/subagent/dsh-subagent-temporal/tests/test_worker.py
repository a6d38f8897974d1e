"""``dsh worker``: registered as a dsh command, capacity by default, SIGTERM drains."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_temporal._worker import WorkerOptions, host_capacity
from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "argv",
    [["-m", "dsh.cli", "worker", "--help"], ["-m", "dsh.subagent_temporal", "worker", "--help"]],
    ids=["dsh-worker", "python-m"],
)
def test_the_worker_command_is_registered(tk: Any, argv: list[str]) -> None:
    done = subprocess.run(
        [tk.PY, *argv], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr
    assert "--task-queue" in done.stdout
    assert "--max-concurrent" in done.stdout


def test_concurrency_defaults_to_the_host_capacity() -> None:
    assert WorkerOptions().max_concurrent is None  # resolved by run_worker to:
    assert host_capacity() >= 1


def test_a_bad_preset_is_a_usage_error(tk: Any, tmp_path: Path) -> None:
    done = run_cli(
        "dsh.subagent_temporal", ["worker", "--preset", str(tmp_path / "none")], timeout=30
    )
    assert done.returncode == 2
    assert "no preset" in done.stderr


async def _running_on(address: str, workflow_id: str, identity: str) -> None:
    from temporalio.api.enums.v1 import PendingActivityState
    from temporalio.client import Client

    client = await Client.connect(address)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        description = await client.get_workflow_handle(workflow_id).describe()
        if any(
            a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            and a.last_worker_identity == identity
            for a in description.raw_description.pending_activities
        ):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the child never ran on {identity}")


async def _outcome(address: str, workflow_id: str) -> dict[str, Any]:
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    client = await Client.connect(address)
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payload = event.activity_task_completed_event_attributes.result.payloads[0]
            found: dict[str, Any] = json.loads(payload.data)
            return found
    raise AssertionError("no outcome")


@pytest.mark.parametrize("grace", [10.0, 0.3], ids=["child-finishes", "child-handed-back"])
@pytest.mark.anyio
async def test_sigterm_drains(
    tk: Any, server: Any, worker_preset: Path, tmp_path: Path, grace: float
) -> None:
    """The draining worker takes no new work; a running child finishes within the grace,
    or is stopped when the grace runs out and handed back: another worker runs it again."""
    queue = f"drain-{grace}"
    args = tk.worker_args(server, queue, worker_preset, None, "--grace", str(grace))
    first = tk.WorkerProcess(args, "drain-1")
    second = None
    try:
        config = tk.provider_config(server, queue)
        async with tk.parent_context(config, tmp_path) as (ctx, provider):
            runtime = SubagentRuntime.of(ctx)
            request = SubagentStartRequest("brief drain", ctx.agents.create(), AbortSignal())
            run = await runtime.start(provider.name, request)
            async with run:
                await _running_on(server.address, run.id, "drain-1")
                first.process.terminate()  # SIGTERM: drain
                if grace < 1:
                    second = tk.WorkerProcess(args, "drain-2")
                result = await asyncio.wait_for(run.result, 20)
            outcome = await _outcome(server.address, run.id)
        assert result.stop_reason == "completed"
        assert result.output == "Briefly: brief drain"
        assert await asyncio.to_thread(first.process.wait, 20) == 0
        summary = first.output()
        assert "draining" in summary
        if grace < 1:
            assert "handed back 1" in summary, summary
            assert (outcome["attempt"], outcome["worker"]) == (2, "drain-2")
        else:
            assert "(completed 1), handed back 0" in summary, summary
            assert (outcome["attempt"], outcome["worker"]) == (1, "drain-1")
    finally:
        first.kill()
        if second is not None:
            second.stop()


SCRIPT_PRESET = """
[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-testing-keyed-model"

[[plugin]]
name = "dsh-testing-example"
config = {{ command_tool = "run" }}

[agent.model]
adapter = "keyed"
[[agent.model.options.rules]]
contains = "run the script"
[[agent.model.options.rules.replies]]
text = "Running it."
tool_calls = [{{ name = "run", arguments = {{ argv = ["/bin/sh", "-c", "{script}"] }} }}]
[[agent.model.options.rules.replies]]
text = "ran: {{tool_results}}"
"""


@pytest.mark.anyio
async def test_sighup_drains_like_sigterm_and_leaves_no_process(
    tk: Any, server: Any, tmp_path: Path
) -> None:
    """SIGHUP (the terminal closed) drains like SIGTERM (issue 21 item 6): the running
    child's process tree is stopped when the grace runs out, the attempt is handed
    back, and the worker exits 0 promptly with nothing of it left running."""
    from dsh.testing.processes import alive, descendants, wait_until_gone

    pid_file = tmp_path / "tool.pid"
    script = f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 120"
    preset = tmp_path / "script-worker.toml"
    preset.write_text(SCRIPT_PRESET.format(script=script), encoding="utf-8")
    queue = f"hup-{uuid.uuid4().hex[:8]}"
    worker = tk.WorkerProcess(
        tk.worker_args(server, queue, preset, None, "--grace", "0.3"), "hup-1"
    )
    tool_pid = 0
    try:
        config = tk.provider_config(server, queue)
        async with tk.parent_context(config, tmp_path) as (ctx, provider):
            runtime = SubagentRuntime.of(ctx)
            request = SubagentStartRequest("run the script", ctx.agents.create(), AbortSignal())
            run = await runtime.start(provider.name, request)
            async with run:
                await _running_on(server.address, run.id, "hup-1")
                deadline = time.monotonic() + 20
                while not pid_file.exists():
                    assert time.monotonic() < deadline, worker.output()
                    await asyncio.sleep(0.05)
                tool_pid = int(pid_file.read_text())
                tree = descendants(worker.pid)
                assert tool_pid in tree
                worker.process.send_signal(signal.SIGHUP)
                signalled = time.monotonic()
                status = await asyncio.to_thread(worker.process.wait, 20)
                elapsed = time.monotonic() - signalled
        assert status == 0, worker.output()
        assert elapsed < 10, elapsed
        await asyncio.to_thread(wait_until_gone, tree, 10)
        summary = worker.output()
        assert "SIGHUP: draining" in summary, summary
        assert "handed back 1" in summary, summary
        # (the SDK logs the handed-back attempt with its traceback, as for SIGTERM)
        assert "KeyboardInterrupt" not in summary, summary
    finally:
        worker.kill()
        if tool_pid and alive(tool_pid):
            os.kill(tool_pid, signal.SIGKILL)
