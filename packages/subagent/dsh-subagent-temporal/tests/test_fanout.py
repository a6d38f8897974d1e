"""A fan-out of 2,500 children shared by two worker processes.

The parent (this process) starts 2,500 delegations at once; they go out as batch
workflows of at most ``batch_max`` delegations; two ``dsh worker`` processes with
different identities run the spawn children. One child answers with its 3 MB prompt
(passed by reference both ways). Checked: every child completed with its own answer,
both workers ran some, and no workflow came near Temporal's limits (pending
activities, history events and size, payload size).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentResult, SubagentRuntime, SubagentStartRequest

pytestmark = pytest.mark.timeout(300)  # 2,500 delegations: slow on a loaded machine

CHILDREN = 2500
BATCH_MAX = 250
HUGE = 3 * 1024 * 1024
PENDING_ACTIVITY_LIMIT = 2000
HISTORY_EVENTS_WARN = 10_240
HISTORY_BYTES_WARN = 10 * 1024 * 1024
PAYLOAD_LIMIT = 2 * 1024 * 1024


@pytest.mark.anyio
async def test_two_workers_share_a_fanout_of_2500(
    tk: Any, server: Any, worker_preset: Path, result_store: Path, tmp_path: Path
) -> None:
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    queue = "fanout"
    args = tk.worker_args(server, queue, worker_preset, result_store, "--max-concurrent", "32")
    first = tk.WorkerProcess(args, "fanout-w1")
    try:
        second = tk.WorkerProcess(args, "fanout-w2")
    except BaseException:
        first.kill()
        raise
    workers = [first, second]
    try:
        # a generous heartbeat timeout: with the tests' 2 s, a worker starved by a loaded
        # machine misses a beat, the attempt is retried, and the superseded attempt's
        # result body (written when it ends anyway) is nobody's to delete
        config = tk.provider_config(
            server,
            queue,
            batch_max=BATCH_MAX,
            result_store=f"file://{result_store}",
            heartbeat_timeout=60.0,
        )
        huge_prompt = "x" * HUGE
        async with tk.parent_context(config, tmp_path) as (ctx, provider):
            runtime = SubagentRuntime.of(ctx)
            parent = ctx.agents.create()

            async def child(number: int) -> tuple[str, SubagentResult]:
                prompt = huge_prompt if number == 0 else f"child {number}"
                request = SubagentStartRequest(prompt, parent, AbortSignal(), label=f"c{number}")
                run = await runtime.start(provider.name, request)
                async with run:
                    return run.id, await run.result

            started = time.monotonic()
            results = await asyncio.gather(*(child(n) for n in range(CHILDREN)))
            elapsed = time.monotonic() - started
        print(f"{CHILDREN} delegations in {elapsed:.1f} s")

        for number, (_run_id, result) in enumerate(results):
            assert result.stop_reason == "completed", (number, result.diagnostic)
            if number:
                assert result.output == f"Done: child {number}"
        huge_output = results[0][1].output
        assert len(huge_output) == HUGE + len("Done: ")
        assert huge_output.startswith("Done: xxx")
        assert len({run_id for run_id, _ in results}) == CHILDREN
        # the store's blobs were collected and removed by the parent
        assert not [p for p in result_store.rglob("*") if p.is_file()]

        client = await Client.connect(server.address)
        workflows = [wf async for wf in client.list_workflows(f'TaskQueue="{queue}"')]
        # (a start that is slower to get ready, the 3 MB one, may go out in a batch of its own)
        assert -(-CHILDREN // BATCH_MAX) <= len(workflows) <= -(-CHILDREN // BATCH_MAX) + 3
        huge_by_reference = False
        for info in workflows:
            assert info.history_length < HISTORY_EVENTS_WARN, info.id
            assert info.raw_info.history_size_bytes < HISTORY_BYTES_WARN, info.id
            handle = client.get_workflow_handle(info.id)
            scheduled = 0
            async for event in handle.fetch_history_events():
                for payload in _payloads(event):
                    assert payload.ByteSize() < PAYLOAD_LIMIT, (info.id, event.event_id)
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    scheduled += 1
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                    data = event.activity_task_completed_event_attributes.result.payloads[0]
                    outcome = json.loads(data.data)
                    if outcome.get("body_ref"):
                        assert outcome["body_ref"]["size"] > HUGE
                        huge_by_reference = True
            assert scheduled <= BATCH_MAX < PENDING_ACTIVITY_LIMIT
        assert huge_by_reference
        print(f"verified in {time.monotonic() - started - elapsed:.1f} s")
    finally:
        for process in workers:
            process.stop()
    ran = [_attempts(process.output()) for process in workers]
    assert all(count > 0 for count in ran), ran
    assert sum(ran) >= CHILDREN, ran


def _payloads(event: Any) -> list[Any]:
    found: list[Any] = []
    for _descriptor, attributes in event.ListFields():
        if not hasattr(attributes, "ListFields"):
            continue
        for _field, value in attributes.ListFields():
            if hasattr(value, "payloads"):
                found.extend(value.payloads)
    return found


def _attempts(output: str) -> int:
    for line in output.splitlines():
        if "stopped; ran " in line:
            return int(line.split("stopped; ran ")[1].split()[0])
    raise AssertionError(f"no summary in the worker's output:\n{output[-2000:]}")
