"""Progress and usage reach the parent live, as the same ``run.progress()`` items as
every other provider: a spawn child on a worker does a tool round trip."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentProgress, SubagentRuntime, SubagentStartRequest

pytestmark = pytest.mark.timeout(60)


@pytest.mark.anyio
async def test_tool_round_trip_yields_items_live_and_in_order(
    tk: Any, server: Any, queue: str, worker: Any, tmp_path: Path
) -> None:
    config = tk.provider_config(server, queue, progress_interval=0.1)
    async with tk.parent_context(config, tmp_path) as (ctx, provider):
        runtime = SubagentRuntime.of(ctx)
        parent = ctx.agents.create()
        on_bus: list[Any] = []
        ctx.events.on("subagent/progress", on_bus.append)
        run = await runtime.start(
            provider.name, SubagentStartRequest("use a tool", parent, AbortSignal())
        )
        items: list[tuple[SubagentProgress, bool]] = []

        async def read() -> None:
            async for item in run.progress():
                items.append((item, run.settled))

        reader = asyncio.get_running_loop().create_task(read())
        async with run:
            result = await run.result
        await asyncio.wait_for(reader, 2)

    assert result.stop_reason == "completed"
    assert result.output == "The tool said: echo: ping"
    assert result.usage.output_tokens > 0
    kinds = [item.kind for item, _ in items]
    wanted = ["text", "tool_call", "tool_update", "text", "usage"]
    position = 0
    for kind in kinds:
        if position < len(wanted) and kind == wanted[position]:
            position += 1
    assert position == len(wanted), kinds
    tool_call = next(item for item, _ in items if item.kind == "tool_call")
    assert tool_call.name == "echo"
    assert tool_call.arguments == {"text": "ping"}
    update = next(item for item, _ in items if item.kind == "tool_update")
    assert update.status == "completed"
    assert update.tool_call_id == tool_call.tool_call_id
    # live: the tool round trip was seen before the child finished (its last step
    # takes a second), through the heartbeats, not only from the outcome
    assert not dict((item.kind, settled) for item, settled in items)["tool_update"]
    assert any(item.kind == "notice" and "worker w-main" in (item.text or "") for item, _ in items)
    assert len(on_bus) >= len(wanted)
