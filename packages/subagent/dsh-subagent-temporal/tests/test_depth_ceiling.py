"""A worker whose children delegate back through Temporal to the same queue, every row
`provider-managed` (issue 21 item 1): the depth travels in the workflow input and the
default ceiling stops the chain at depth 5; the deepest model sees the refusal."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent.kit import DEFAULT_MAX_DEPTH
from dsh.testing.fixtures import calling_replies, keyed_preset, plugin_rows

pytestmark = pytest.mark.timeout(120)


def self_chain(address: str, queue: str) -> str:
    """A worker preset whose model delegates every prompt back through Temporal."""
    temporal = {
        "address": address,
        "task_queue": queue,
        "journal": "off",
        "retry": {"initial_interval": 0.2},
    }
    tool = {"provider": "temporal", "tool_name": "subagent_t", "max_depth": "provider-managed"}
    return plugin_rows("dsh-subagent-spawn-in-process") + keyed_preset(
        default=calling_replies(
            "subagent_t", "recurse", description="go deeper", then="level done <{tool_results}>"
        ),
        plugins=plugin_rows(("dsh-subagent-temporal", temporal), ("dsh-tool-subagent", tool)),
    )


@pytest.fixture
def self_chain_worker(tk: Any, server: Any, tmp_path: Path) -> Iterator[str]:
    queue = f"chain-{tmp_path.name}"
    preset = tmp_path / "worker.toml"
    preset.write_text(self_chain(server.address, queue), encoding="utf-8")
    args = tk.worker_args(server, queue, preset, None, "--max-concurrent", "8")
    worker = tk.WorkerProcess(args, "chain-w")
    try:
        yield queue
    finally:
        worker.stop()


@pytest.mark.anyio
async def test_a_chain_through_temporal_stops_at_the_default_ceiling(
    tk: Any, server: Any, self_chain_worker: str, tmp_path: Path
) -> None:
    config = tk.provider_config(server, self_chain_worker, journal="off")
    async with tk.parent_context(config, tmp_path) as (ctx, provider):
        parent = ctx.agents.create()
        run = await SubagentRuntime.of(ctx).start(
            provider.name, SubagentStartRequest("recurse", parent, AbortSignal())
        )
        async with run:
            result = await asyncio.wait_for(run.result, 90)
    assert result.stop_reason == "completed", result
    assert result.output.count("level done") == DEFAULT_MAX_DEPTH, result.output
    depth = DEFAULT_MAX_DEPTH + 1
    assert f"subagent depth {depth} exceeds max_depth {DEFAULT_MAX_DEPTH}" in result.output
