"""A stop the server could not take is not reported as made: the Temporal dev server is
killed while two children wait on their (fake, hung) model server, then

* an in-process parent aborts its run: it settles ``error`` within a bound, saying the
  cancel could not be delivered; it stays open, and delivers the stop once the server
  is back (the workflow is terminated);
* ``dsh run --json`` hits its ``turn_timeout``: the same diagnostic in its
  ``subagent/end`` line; every stdout line is JSON although the SDK retried (and
  warned) meanwhile; then it exits, so nobody is left to deliver that stop: the
  workflow's own turn deadline ends it once the server is back.

The server restarts on the same SQLite file; the workers' lost attempts are retried,
and neither child gets to finish its work (no delegation completes).
"""

# ruff: noqa: E501  (the presets below are TOML, one row a line)

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.testing.fixtures import fake_openai_preset
from dsh.testing.model_servers import ChatReply, Hang, OpenAIChatServer, StreamFaults

pytestmark = pytest.mark.timeout(120)

TURN_TIMEOUT = 8.0
"""``dsh run``'s turn_timeout: past the moment the server is killed."""
UNDELIVERED = "the cancel could not be delivered"


LEAD = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{{ name = "delegate", arguments = {{ description = "remote", prompt = "work a" }} }}]
[[agent.model.options.replies]]
text = "lead got: {{tool_results}}"

[[plugin]]
name = "dsh-subagent-temporal"
config = {{ address = "{address}", task_queue = "{queue}", turn_timeout = {turn_timeout}, heartbeat_timeout = 2.0, journal = "off", retry = {{ initial_interval = 0.2 }} }}

[[plugin]]
name = "dsh-tool-subagent"
config = {{ provider = "temporal", tool_name = "delegate", max_depth = 3 }}
"""


def _env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "DEEPSEEK_", "TEMPORAL_"))
    }


async def _closed(address: str, workflow_id: str, within: float) -> tuple[str, list[str]]:
    """Wait until the workflow is closed: its status and the stop reasons of the
    delegation outcomes in its history (activity results and the workflow's result)."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client, WorkflowExecutionStatus

    client = await Client.connect(address)
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + within
    while True:
        description = await handle.describe()
        if description.status != WorkflowExecutionStatus.RUNNING:
            break
        assert time.monotonic() < deadline, f"{workflow_id} still runs after {within} s"
        await asyncio.sleep(0.2)
    assert description.status is not None
    reasons = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payload = event.activity_task_completed_event_attributes.result.payloads[0]
            outcome = json.loads(payload.data)
            reasons.append(outcome["stop_reason"])
            print(f"{workflow_id}: {outcome['stop_reason']}: {outcome.get('diagnostic')}")
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payload = event.workflow_execution_completed_event_attributes.result.payloads[0]
            outcomes = json.loads(payload.data)["outcomes"]
            reasons += [o["stop_reason"] for o in outcomes.values()]
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            reasons.append(f"failed: {event.workflow_execution_failed_event_attributes.failure}")
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            reasons.append(f"task failed: {event.workflow_task_failed_event_attributes.failure}")
    return description.status.name, reasons


@pytest.mark.anyio
async def test_a_stop_while_the_server_is_down_is_an_error_and_happens_later(
    tk: Any, tmp_path: Path
) -> None:
    server = tk.DevServer(tmp_path)  # its own: this test kills and restarts it
    server.start()
    # the first attempts hang on the model; a later one would finish in ~7 s
    model = OpenAIChatServer(
        Hang(), Hang(), default=ChatReply(text="finished the work", faults=StreamFaults(delay=1.0))
    ).start()
    worker = lead = None
    try:
        queue = "down"
        preset = tmp_path / "worker.toml"
        preset.write_text(
            fake_openai_preset(model.api_base, "dsh-subagent-spawn-in-process"), encoding="utf-8"
        )
        worker = tk.WorkerProcess(tk.worker_args(server, queue, preset), "down-w")
        lead_preset = tmp_path / "lead.toml"
        lead_preset.write_text(
            LEAD.format(address=server.address, queue=queue, turn_timeout=TURN_TIMEOUT),
            encoding="utf-8",
        )
        out = (tmp_path / "out.jsonl").open("w")
        lead = subprocess.Popen(  # noqa: ASYNC220 - started, not waited for
            [sys.executable, "-m", "dsh.cli", "run", "--json", "--preset", str(lead_preset), "go"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=tmp_path,
        )
        config = tk.provider_config(server, queue, journal="off")
        async with tk.parent_context(config, tmp_path) as (ctx, provider):
            signal = AbortSignal()
            request = SubagentStartRequest("work b", ctx.agents.create(), signal)
            run = await SubagentRuntime.of(ctx).start(provider.name, request)
            await model.async_wait_until(lambda: len(model.requests) >= 2, timeout=30)

            server.kill()
            signal.abort("the parent changed its mind")
            started = time.monotonic()
            result = await asyncio.wait_for(run.result, 30)
            elapsed = time.monotonic() - started
            print(
                f"the in-process run settled {result.stop_reason} {elapsed:.2f} s after the abort"
            )
            assert result.stop_reason == "error", result
            diagnostic = result.diagnostic or ""
            for part in (UNDELIVERED, "unreachable", "may still run", server.address):
                assert part in diagnostic, diagnostic
            assert elapsed < 10, f"settled after {elapsed:.2f} s"

            # dsh run: its turn_timeout while the server is still down
            _, err = await asyncio.to_thread(lead.communicate, timeout=60)
            out.close()
            lines = (tmp_path / "out.jsonl").read_text().splitlines()
            events = [json.loads(line) for line in lines]  # every line is JSON
            # 3: the lead answered, a delegation failed
            assert lead.returncode == 3, err[-3000:]
            assert any(e["type"] == "answer" for e in events), events
            end = next(e for e in events if e["type"] == "subagent/end")
            assert end["stop_reason"] == "error", end
            assert UNDELIVERED in end["diagnostic"], end
            assert f"{TURN_TIMEOUT:g} s ran out" in end["diagnostic"], end
            assert "sdk_core" in err or "retried" in err, err[-3000:]  # the SDK did warn

            server.start()  # the same SQLite file: the workflows are still there
            b_status, b_reasons = await _closed(server.address, run.id, 40)
            a_status, a_reasons = await _closed(server.address, end["run_id"], 40)
        print(f"model requests: {len(model.requests)}; outcomes a {a_reasons}, b {b_reasons}")
        assert b_status == "TERMINATED", (b_status, b_reasons)  # delivered late by the parent
        assert a_status == "COMPLETED", (a_status, a_reasons)  # its turn deadline
        assert "completed" not in a_reasons + b_reasons
        assert len(model.requests) <= 4  # at most one more attempt each, stopped
    finally:
        if lead is not None and lead.poll() is None:
            lead.kill()
            lead.wait(10)
        if worker is not None:
            worker.stop()
        model.close()
        server.kill()
