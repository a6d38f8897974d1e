"""Crash survival: a 4-child delegation outlives its worker, the server and its parent.

A parent process starts four slow children; once all four run on worker A, worker A
and the parent are SIGKILLed and the dev server is killed and started again on the
same SQLite file. Worker B takes the children over (attempt 2) and completes them;
a new parent process reconnects through the journal and receives each result exactly
once; a third parent finds nothing left to collect.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(90)

CHILDREN = 4


def _parent(tk: Any, action: str, server: Any, queue: str, journal: Path) -> list[str]:
    return [
        tk.PY, str(tk.HERE / "_parent.py"), action, "--address", server.address,
        "--queue", queue, "--journal", str(journal), "--count", str(CHILDREN),
    ]  # fmt: skip


def _start_parent(tk: Any, server: Any, queue: str, journal: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _parent(tk, "start", server, queue, journal),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _collect(tk: Any, server: Any, queue: str, journal: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        _parent(tk, "collect", server, queue, journal),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


async def _all_running(address: str, workflow_id: str, identity: str, within: float) -> None:
    from temporalio.api.enums.v1 import PendingActivityState
    from temporalio.client import Client

    client = await Client.connect(address)
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        description = await handle.describe()
        running = [
            activity
            for activity in description.raw_description.pending_activities
            if activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            and activity.last_worker_identity == identity
        ]
        if len(running) == CHILDREN:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the {CHILDREN} children never all ran on {identity}")


async def _outcomes(address: str, workflow_id: str) -> list[dict[str, Any]]:
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    client = await Client.connect(address)
    found = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payload = event.activity_task_completed_event_attributes.result.payloads[0]
            found.append(json.loads(payload.data))
    return found


@pytest.mark.anyio
async def test_worker_server_and_parent_crash_then_each_result_arrives_once(
    tk: Any, worker_preset: Path, tmp_path: Path
) -> None:
    server = tk.DevServer(tmp_path)  # its own: this test kills and restarts it
    server.start()
    try:
        await _crash_and_recover(tk, server, worker_preset, tmp_path)
    finally:
        server.kill()


async def _crash_and_recover(tk: Any, server: Any, worker_preset: Path, tmp_path: Path) -> None:
    queue = "crash"
    journal = tmp_path / "delegations.jsonl"
    args = tk.worker_args(server, queue, worker_preset, None, "--max-concurrent", "4")
    first = tk.WorkerProcess(args, "crash-a")
    parent = _start_parent(tk, server, queue, journal)
    second = None
    try:
        assert parent.stdout is not None
        line = await asyncio.to_thread(parent.stdout.readline)
        runs = json.loads(line)["runs"]
        assert len(runs) == CHILDREN
        workflow_id = runs[0].rpartition("/")[0]
        assert all(run.startswith(workflow_id + "/") for run in runs)
        await _all_running(server.address, workflow_id, "crash-a", within=20)

        first.kill()  # SIGKILL: mid-run, the children die with it (its watchdog)
        parent.kill()
        parent.wait(10)
        server.restart()  # killed and started again on the same SQLite file
        second = tk.WorkerProcess(args, "crash-b")

        results = await asyncio.to_thread(_collect, tk, server, queue, journal)
        collected = [r for r in results if "run" in r]
        assert sorted(r["run"] for r in collected) == sorted(runs)  # each exactly once
        for result in collected:
            number = runs.index(result["run"])
            assert result["stop_reason"] == "completed", result
            assert result["output"] == f"Slowly: slow job {number}"
        assert results[-1] == {"outstanding_after": 0}

        outcomes = await _outcomes(server.address, workflow_id)
        assert len(outcomes) == CHILDREN
        assert all(o["attempt"] >= 2 and o["worker"] == "crash-b" for o in outcomes), outcomes

        again = await asyncio.to_thread(
            _collect, tk, server, queue, journal
        )  # nothing is delivered twice
        assert again == [{"outstanding_after": 0}]
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        first.kill()
        if second is not None:
            second.stop()
