"""Issue 24, item 4, on Temporal: a server outage longer than ``heartbeat_timeout``
with ``dsh worker --tapes DIR``. The child (the worker's model: the fake OpenAI chat
server, which counts the calls) has made 3 model calls and 2 tool runs and is running
its third tool when the Temporal dev server goes away for twice the heartbeat timeout:
killed, then started again on the same port and SQLite file; or frozen (SIGSTOP: its
connections stay open and nothing answers), then thawed.

* Attempt 1 cannot heartbeat: its worker stops it (the child disposed, its tool's
  process gone) once the server has been out of reach for ``heartbeat_timeout`` less
  one heartbeat period, while the server is still gone, and it makes no model call
  meanwhile;
* once the server is back it times the attempt out and attempt 2 runs (on the same
  worker): the 3 completed model calls are answered from the tape (the server sees
  each call number once) and the 2 completed tool runs are not run again; only the
  tool in flight runs again (at least once). Attempt 1 is long gone when attempt 2
  reaches that tool: the two never run at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.tape import read_tape
from dsh.testing.model_servers import OpenAIChatServer
from dsh.testing.processes import alive, cmdline, descendants

pytestmark = pytest.mark.timeout(120)


async def _last_outcome(address: str, workflow_id: str) -> dict[str, Any]:
    """The delegation outcome the workflow's history holds (its completed activity)."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    client = await Client.connect(address)
    outcomes = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payload = event.activity_task_completed_event_attributes.result.payloads[0]
            outcomes.append(json.loads(payload.data))
    assert len(outcomes) == 1, outcomes
    result: dict[str, Any] = outcomes[0]
    return result


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["killed", "frozen"])
async def test_attempt_2_resumes_from_the_tape_after_a_server_outage(
    tk: Any, tmp_path: Path, how: str
) -> None:
    runs, pids, release = tmp_path / "runs.txt", tmp_path / "pids.txt", tmp_path / "release"
    tapes = tmp_path / "tapes"
    timeout = tk.HEARTBEAT_TIMEOUT
    server = tk.DevServer(tmp_path)  # its own: this test kills and restarts it
    server.start()
    model = OpenAIChatServer(default=tk.three_tools(runs, release, pids)).start()
    worker = None
    try:
        preset = tmp_path / "worker.toml"
        preset.write_text(tk.TAPE_PRESET.format(base_url=model.api_base), encoding="utf-8")
        queue = f"outage-{uuid.uuid4().hex[:8]}"
        args = tk.worker_args(server, queue, preset, None, "--tapes", str(tapes))
        worker = tk.WorkerProcess(args, "outage-w")
        config = tk.provider_config(server, queue, journal="off")
        async with tk.parent_context(config, tmp_path) as (ctx, provider):
            request = SubagentStartRequest("run three tools", ctx.agents.create(), AbortSignal())
            run = await SubagentRuntime.of(ctx).start(provider.name, request)
            async with run:
                # 3 model calls made, 2 tool runs done, the third tool running
                await tk.wait_for(
                    lambda: pids.exists() and len(pids.read_text().split()) == 1,
                    30,
                    lambda: f"the third tool never started: {worker.output()[-3000:]}",
                )
                assert runs.read_text().split() == ["1", "2", "3"]
                attempt_1 = list(model.requests)
                assert tk.call_numbers(attempt_1) == {0: 1, 1: 1, 2: 1}
                in_flight = int(pids.read_text())

                if how == "killed":
                    server.kill()
                else:
                    server.process.send_signal(signal.SIGSTOP)
                down = time.monotonic()
                # attempt 1 cannot heartbeat: its worker stops it while the server is down
                await tk.wait_for(
                    lambda: not alive(in_flight),
                    timeout + 5,
                    lambda: f"attempt 1's tool still runs: {worker.output()[-3000:]}",
                )
                stopped = time.monotonic() - down
                await asyncio.sleep(max(0.0, down + 2 * timeout - time.monotonic()))
                outage = time.monotonic() - down
                during = len(model.requests) - len(attempt_1)
                if how == "killed":
                    server.start()  # the same port and SQLite file: the workflow is there
                else:
                    server.process.send_signal(signal.SIGCONT)
                # attempt 2 has replayed the first steps and runs the third tool again
                await tk.wait_for(
                    lambda: len(pids.read_text().split()) == 2,
                    30,
                    lambda: f"attempt 2's third tool never started: {worker.output()[-3000:]}",
                )
                release.touch()
                result = await asyncio.wait_for(run.result, 60)
            attempt_2 = model.requests[len(attempt_1) :]
            outcome = await _last_outcome(server.address, run.id)
        print(
            f"server {how}: outage {outage:.1f} s (heartbeat_timeout {timeout:g} s);"
            f" attempt 1 stopped {stopped:.1f} s into it; model calls by call number: attempt 1"
            f" {dict(tk.call_numbers(attempt_1))}, during the outage {during}, attempt 2"
            f" {dict(tk.call_numbers(attempt_2))}; tool runs {runs.read_text().split()}"
        )
        assert result.stop_reason == "completed", result
        assert result.output == "all three ran"
        assert (outcome["attempt"], outcome["worker"]) == (2, "outage-w"), outcome
        assert stopped <= timeout + 2, f"attempt 1 stopped {stopped:.1f} s into the outage"
        assert during == 0
        # attempt 2: no completed model call repeated, only the last one is new
        assert tk.call_numbers(attempt_2) == {3: 1}
        # the two completed tool runs were not run again; the one in flight was
        assert runs.read_text().split() == ["1", "2", "3", "3"]
        assert len(pids.read_text().split()) == 2
        (tape_dir,) = list(tapes.iterdir())
        tape = read_tape(tape_dir)
        assert len(tape.exchanges) == 4
        assert [t["call"] for t in tape.tools] == [0, 1, 2]
        assert "unreachable" in worker.output(), worker.output()[-3000:]
    finally:
        if worker is not None:
            worker.stop()
        model.close()
        server.kill()
    left = [p for p in descendants(os.getpid()) if str(release) in cmdline(p)]
    assert not left, left


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "reached"),
    [
        ("PERMISSION_DENIED", True),  # a server that refuses has answered
        ("UNIMPLEMENTED", True),
        ("UNAVAILABLE", False),
        ("DEADLINE_EXCEEDED", False),
        ("hang", False),
    ],
)
async def test_the_contact_counts_any_answer_and_nothing_else(
    tk: Any, answer: str, reached: bool
) -> None:
    """ServerContact's rule, one probe answer at a time (the probe stands in for the
    server's ``GetSystemInfo`` answer: an error status, or none at all)."""
    from temporalio.service import RPCError, RPCStatusCode

    from dsh.subagent_temporal._contact import ServerContact

    asked: list[float] = []

    async def probe(within: float) -> object:
        asked.append(within)
        if answer == "hang":
            await asyncio.sleep(30)
        raise RPCError(f"the server says {answer}", RPCStatusCode[answer], b"")

    contact = ServerContact(probe)
    async with contact.watching(0.05) as watch:
        await tk.wait_for(lambda: len(asked) >= 3, 10, lambda: f"probed {len(asked)} times")
        silent = watch.silent_for()
        if reached:
            assert contact.last_error == ""
            assert silent < 1.0, silent
        else:
            expected = "no answer within" if answer == "hang" else answer
            assert expected in contact.last_error, contact.last_error
            assert silent >= 0.09, silent  # about two probe periods without an answer
    probes = len(asked)
    await asyncio.sleep(0.2)  # four probe periods: none may start with no watcher left
    assert len(asked) == probes
