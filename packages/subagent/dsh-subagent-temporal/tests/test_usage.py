"""A remote child's usage includes what its own delegations spent: the child on the
worker (spawn, scripted) delegates to a spawn grandchild; the parent's result counts
both (the scripted model reports one output token per word of its reply)."""

# ruff: noqa: E501  (the preset below is TOML, one row a line)

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentRuntime, SubagentStartRequest

pytestmark = pytest.mark.timeout(60)

GRANDCHILD_SAYS = "grandchild says hello there friend"
CHILD_PRESET = f"""
[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
[plugin.config]
provider = "spawn"
tool_name = "subagent"
max_depth = 3
agent_options = {{ model = {{ adapter = "scripted", options = {{ replies = [{{ text = "{GRANDCHILD_SAYS}" }}] }} }} }}

[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
text = "Delegating."
tool_calls = [{{ name = "subagent", arguments = {{ description = "inner", prompt = "inner work" }} }}]
[[agent.model.options.replies]]
text = "child done."
"""
CHILD_TOKENS = 1 + 2
"""One output token a word: "Delegating." and "child done."."""
GRANDCHILD_TOKENS = len(GRANDCHILD_SAYS.split())


@pytest.fixture
def delegating_worker(tk: Any, server: Any, tmp_path: Path) -> Iterator[str]:
    preset = tmp_path / "worker.toml"
    preset.write_text(CHILD_PRESET, encoding="utf-8")
    queue = f"usage-{tmp_path.name}"
    worker = tk.WorkerProcess(tk.worker_args(server, queue, preset), "usage-w")
    try:
        yield queue
    finally:
        worker.stop()


@pytest.mark.anyio
async def test_the_result_counts_the_grandchild(
    tk: Any, server: Any, delegating_worker: str, tmp_path: Path
) -> None:
    config = tk.provider_config(server, delegating_worker, journal="off")
    async with tk.parent_context(config, tmp_path) as (ctx, provider):
        parent = ctx.agents.create()
        run = await SubagentRuntime.of(ctx).start(
            provider.name, SubagentStartRequest("go", parent, AbortSignal())
        )
        async with run:
            result = await asyncio.wait_for(run.result, 30)
        report = SubagentRuntime.of(ctx).usage(parent)
    assert (result.stop_reason, result.output) == ("completed", "child done."), result
    assert result.usage.output_tokens == CHILD_TOKENS + GRANDCHILD_TOKENS, result.usage
    assert report.total.output_tokens == CHILD_TOKENS + GRANDCHILD_TOKENS
