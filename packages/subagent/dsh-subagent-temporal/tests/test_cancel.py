"""Cancel reaches process trees on the worker: ``sleep 300`` trees with a ``setsid``
grandchild, started by acp children (the mock ACP agent in hang mode, under a shell
that starts the sleeps first). Aborting the parent's signals settles the runs
``aborted`` within heartbeat timeout + 2 s and leaves no descendant of the worker;
the same when the worker is SIGKILLed instead of cancelling (its dsh watchdog kills
the trees, the parent settles on its own after the cancel grace).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.testing.processes import cmdline, descendants, wait_until_gone

pytestmark = pytest.mark.timeout(60)

TREES = 2
TREE_SCRIPT = 'sleep 300 & setsid sleep 300 & exec "$0" -m dsh.testing.mock_acp_agent --mode hang'


@pytest.fixture(scope="module")
def acp_preset(tk: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("acp") / "worker.toml"
    path.write_text(
        f"""
[[plugin]]
name = "dsh-subagent-acp"
[plugin.config]
name = "acp-sleep"
command = "sh"
args = ["-c", '{TREE_SCRIPT}', "{tk.PY}"]
eof_grace = 0.5
term_grace = 0.5
cancel_grace = 1.0
""",
        encoding="utf-8",
    )
    return path


def _tree(worker_pid: int) -> set[int]:
    """The worker's descendants, its dsh watchdog excepted."""
    return {pid for pid in descendants(worker_pid) if "dsh-watchdog" not in cmdline(pid)}


async def _trees_running(worker_pid: int, within: float) -> set[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        tree = _tree(worker_pid)
        sleeps = [pid for pid in tree if cmdline(pid) == "sleep 300"]
        agents = [  # (not the bwrap that sandboxes it, whose command line names it too)
            pid for pid in tree if "mock_acp_agent" in cmdline(pid) and "bwrap" not in cmdline(pid)
        ]
        if len(sleeps) == 2 * TREES and len(agents) == TREES:
            return tree
        await asyncio.sleep(0.1)
    raise AssertionError(f"the process trees never all ran: {sorted(_tree(worker_pid))}")


@pytest.fixture
def cancel_worker(tk: Any, server: Any, acp_preset: Path) -> Iterator[Any]:
    queue = f"cancel-{time.monotonic_ns()}"
    worker = tk.WorkerProcess(tk.worker_args(server, queue, acp_preset), "cancel-w")
    try:
        yield worker, queue
    finally:
        worker.stop()


@pytest.mark.parametrize("worker_dies", [False, True], ids=["worker-cancels", "worker-killed"])
@pytest.mark.anyio
async def test_cancel_settles_aborted_and_leaves_no_process(
    tk: Any, server: Any, cancel_worker: Any, tmp_path: Path, worker_dies: bool
) -> None:
    worker, queue = cancel_worker
    bound = tk.HEARTBEAT_TIMEOUT + 2
    config = tk.provider_config(server, queue, provider="acp-sleep")
    async with tk.parent_context(config, tmp_path) as (ctx, provider):
        runtime = SubagentRuntime.of(ctx)
        parent = ctx.agents.create()
        signals = [AbortSignal() for _ in range(TREES)]
        runs = await asyncio.gather(
            *(
                runtime.start(provider.name, SubagentStartRequest("work", parent, signal))
                for signal in signals
            )
        )
        try:
            tree = await _trees_running(worker.pid, within=30)
            if worker_dies:
                worker.kill()  # SIGKILL: it cannot cancel anything
            started = time.monotonic()
            for signal in signals:
                signal.abort("parent cancelled")
            results = await asyncio.wait_for(
                asyncio.gather(*(run.result for run in runs)), bound + 1
            )
            elapsed = time.monotonic() - started
        finally:
            for run in runs:
                await run.dispose()
    assert [result.stop_reason for result in results] == ["aborted"] * TREES, results
    print(f"settled aborted {elapsed:.2f} s after the abort (bound {bound} s)")
    assert elapsed <= bound, f"settled after {elapsed:.2f} s (bound {bound} s)"
    # the worker disposes each child before it reports; a killed worker's watchdog kills
    # the trees at once
    await asyncio.to_thread(wait_until_gone, tree, 2.0)
