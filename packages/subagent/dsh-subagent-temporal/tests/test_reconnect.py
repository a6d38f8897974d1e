"""A parent that closes (or restarts) reconnects to its delegations by run id."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import NotResumable, SubagentRuntime, SubagentStartRequest

pytestmark = pytest.mark.timeout(60)


@pytest.mark.anyio
async def test_a_closing_parent_detaches_and_a_new_one_collects_once(
    tk: Any, server: Any, queue: str, worker: Any, tmp_path: Path
) -> None:
    sessions = tmp_path / "sessions"  # the journal lives beside the sessions
    config = tk.provider_config(server, queue)
    async with tk.parent_context(config, tmp_path, sessions) as (ctx, provider):
        parent = ctx.agents.create()
        run = await SubagentRuntime.of(ctx).start(
            provider.name, SubagentStartRequest("slow detach", parent, AbortSignal())
        )
        run_id = run.id
    # the context closed under the running child: the run was detached, not cancelled
    detached = await run.result
    assert detached.stop_reason == "aborted"
    assert "detached" in (detached.diagnostic or "")
    assert run_id in (detached.diagnostic or "")

    async with tk.parent_context(config, tmp_path, sessions) as (ctx, provider):
        outstanding = provider.outstanding(ctx)
        assert [entry["run"] for entry in outstanding] == [run_id]
        events: list[Any] = []
        ctx.events.on("subagent/end", events.append)
        again = await provider.reconnect(run_id, ctx.agents.create())
        async with again:
            result = await asyncio.wait_for(again.result, 20)
        assert (again.id, result.stop_reason, result.output) == (
            run_id,
            "completed",
            "Slowly: slow detach",
        )
        assert [e.data["run_id"] for e in events] == [run_id]
        assert provider.outstanding(ctx) == []


@pytest.mark.anyio
async def test_reconnecting_to_an_unknown_run_id_is_refused(
    tk: Any, server: Any, queue: str, tmp_path: Path
) -> None:
    async with tk.parent_context(tk.provider_config(server, queue), tmp_path) as (ctx, provider):
        with pytest.raises(NotResumable, match="no delegation workflow"):
            await provider.reconnect("dsh-does-not-exist", ctx.agents.create())
