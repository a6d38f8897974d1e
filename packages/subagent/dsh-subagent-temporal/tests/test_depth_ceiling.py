# ruff: noqa: E501  (the preset below is TOML, one row a line)

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

pytestmark = pytest.mark.timeout(120)

SELF_CHAIN = """
[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-testing-keyed-model"

[[plugin]]
name = "dsh-subagent-temporal"
config = {{ address = "{address}", task_queue = "{queue}", journal = "off", retry = {{ initial_interval = 0.2 }} }}

[[plugin]]
name = "dsh-tool-subagent"
config = {{ provider = "temporal", tool_name = "subagent_t", max_depth = "provider-managed" }}

[agent.model]
adapter = "keyed"
[[agent.model.options.default]]
[[agent.model.options.default.tool_calls]]
name = "subagent_t"
arguments = {{ description = "go deeper", prompt = "recurse" }}
[[agent.model.options.default]]
text = "level done <{{tool_results}}>"
"""


@pytest.fixture
def self_chain_worker(tk: Any, server: Any, tmp_path: Path) -> Iterator[str]:
    queue = f"chain-{tmp_path.name}"
    preset = tmp_path / "worker.toml"
    preset.write_text(SELF_CHAIN.format(address=server.address, queue=queue), encoding="utf-8")
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
