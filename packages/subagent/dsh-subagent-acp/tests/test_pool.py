"""Warm pools of ACP agent processes (issue 15): reuse, recycling, and no process left.

Most tests drive ``pool_agent.py``, an agent that answers ``who`` with its pid, the
session, the session's cwd and lineage; the last ones a real ``dsh acp``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Agent, Context, parse_preset
from dsh.subagent import SubagentError, SubagentResult, SubagentRuntime, SubagentStartRequest
from dsh.subagent.kit import DEFAULT_MAX_DEPTH
from dsh.subagent_acp import AcpProvider, AcpProviderConfig
from dsh.subagent_acp._agent import AcpAgentProcess
from dsh.subprocess import ProcessPool
from dsh.testing.processes import alive, cmdline, live_children, process_tree

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

AGENT = str(Path(__file__).with_name("pool_agent.py"))
PARENT_SCRIPT = str(Path(__file__).with_name("pool_parent.py"))
PARENT_PRESET = '[agent.model]\nadapter = "scripted"\n[sandbox]\nmode = "off"\n'
"""Unsandboxed: these tests follow processes by the pid the agent reports, which a
sandbox's PID namespace hides (test_sandbox.py covers pools under a sandbox)."""


def agent_config(*args: str, **pool: Any) -> AcpProviderConfig:
    """The pool agent with ``pool`` settings (size 1 unless given)."""
    pool.setdefault("size", 1)
    return AcpProviderConfig(
        name="acp-pool",
        command=sys.executable,
        args=[AGENT, *args],
        depth_limit=True,
        eof_grace=1.0,
        term_grace=1.0,
        cancel_grace=2.0,
        pool=pool,
    )


class PoolRig:
    """A context with one pooled provider and a parent agent."""

    def __init__(self, ctx: Context, provider: AcpProvider) -> None:
        self.ctx = ctx
        self.provider = provider
        self.runtime = SubagentRuntime.of(ctx)
        self.runtime.register_provider(provider)
        self.parent = ctx.agents.create()

    @property
    def pool(self) -> ProcessPool[AcpAgentProcess]:
        pool = self.provider.pool(self.ctx)
        assert pool is not None
        return pool

    async def start(
        self, prompt: str, parent: Agent | None = None, signal: AbortSignal | None = None
    ) -> Any:
        request = SubagentStartRequest(prompt, parent or self.parent, signal or AbortSignal())
        return await self.runtime.start(self.provider.name, request)

    async def run(self, prompt: str, parent: Agent | None = None) -> SubagentResult:
        run = await self.start(prompt, parent)
        async with run:
            with anyio.fail_after(30):
                return await run.result

    async def who(self, parent: Agent | None = None) -> dict[str, Any]:
        result = await self.run("who", parent)
        assert result.stop_reason == "completed", result
        facts: dict[str, Any] = json.loads(result.output)
        return facts


async def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def gone(pids: set[int], timeout: float = 5.0) -> None:
    await wait_for(lambda: not process_tree(pids), timeout)


def preset() -> Any:
    return parse_preset(PARENT_PRESET)


@asynccontextmanager
async def open_rig(tmp_path: Path, config: AcpProviderConfig) -> AsyncIterator[PoolRig]:
    async with Context.open(preset(), cwd=tmp_path) as ctx:
        rig = PoolRig(ctx, AcpProvider(config))
        await rig.pool.wait_ready(timeout=30)
        yield rig


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[PoolRig]:
    """A warm pool of one agent process (max_runs 50, no idle timeout)."""
    async with open_rig(tmp_path, agent_config(idle_timeout=0)) as rig:
        yield rig


async def test_a_pooled_run_reuses_the_warm_process_with_a_fresh_session_in_its_own_cwd(
    rig: PoolRig, tmp_path: Path
) -> None:
    (warm,) = rig.pool.pids()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other_parent = rig.ctx.agents.create(meta={"cwd": str(elsewhere)})
    first = await rig.who()
    second = await rig.who(other_parent)
    assert first["pid"] == second["pid"] == warm
    assert first["session"] != second["session"]
    assert (first["cwd"], second["cwd"]) == (str(tmp_path), str(elsewhere))
    # the first session was closed (session/close) before the process served again
    assert (second["open"], second["total"], second["closed"]) == (1, 2, [first["session"]])
    # lineage travels in _meta only: the shared process has no run's depth variables
    assert first["lineage"] == {
        "depth": 1,
        "maxDepth": DEFAULT_MAX_DEPTH,  # provider-managed still has the ceiling
        "parentSession": rig.parent.id,
    }
    assert second["lineage"]["parentSession"] == other_parent.id
    assert first["env_depth"] is None
    assert first["init_meta"] == {}
    assert rig.pool.started == 1
    assert rig.pool.pids() == {warm}


async def test_a_crash_mid_run_settles_only_that_run_and_the_process_is_replaced(
    tmp_path: Path,
) -> None:
    async with open_rig(tmp_path, agent_config(size=2, idle_timeout=0)) as rig:
        first, second = sorted(rig.pool.pids())
        busy = await rig.start("hang")  # holds one process
        (busy_pid,) = {first, second} - rig.pool.pids()
        crashing = await rig.start("crash")  # the other one
        with anyio.fail_after(20):
            crashed = await crashing.result
        await crashing.dispose()
        assert crashed.stop_reason == "error"
        assert "exited (exit status 3)" in (crashed.diagnostic or "")
        assert "pool agent: crashing on purpose" in (crashed.diagnostic or "")
        assert not busy.settled  # the other run on the other process goes on
        await wait_for(lambda: len(rig.pool.idle) == 1)  # replaced in the background
        facts = await rig.who()
        assert facts["pid"] not in (first, second)
        assert rig.pool.recycled["exited"] + rig.pool.recycled["error"] == 1
        assert alive(busy_pid)
        await busy.dispose()
        assert (await busy.result).stop_reason == "aborted"


async def test_cancel_recycles_the_process(rig: PoolRig) -> None:
    (warm,) = rig.pool.pids()
    signal = AbortSignal()
    run = await rig.start("hang", signal=signal)
    with anyio.fail_after(30):  # the agent is at work: it said so
        async with run.progress() as items:
            async for item in items:
                if item.kind == "text":
                    break
    signal.abort("parent cancelled")
    async with run:
        with anyio.fail_after(10):
            result = await run.result
    assert result.stop_reason == "aborted"
    assert not alive(warm)  # dispose waited for the cancelled process to be stopped
    assert rig.pool.recycled["cancelled"] == 1
    facts = await rig.who()
    assert facts["pid"] != warm


async def test_an_error_answer_recycles_the_process(rig: PoolRig) -> None:
    (warm,) = rig.pool.pids()
    result = await rig.run("fail")
    assert result.stop_reason == "error"
    assert "the pool agent fails this prompt" in (result.diagnostic or "")
    assert not alive(warm)
    assert (await rig.who())["pid"] != warm


async def test_max_runs_recycles_the_process(tmp_path: Path) -> None:
    async with open_rig(tmp_path, agent_config(max_runs=2, idle_timeout=0)) as rig:
        pids = [(await rig.who())["pid"] for _ in range(3)]
        assert pids[0] == pids[1] != pids[2]
        assert rig.pool.recycled["max_runs"] == 1
        await gone({pids[0]})


async def test_idle_timeout_recycles_the_process(tmp_path: Path) -> None:
    async with open_rig(tmp_path, agent_config(idle_timeout=0.5)) as rig:
        first = (await rig.who())["pid"]
        await wait_for(lambda: rig.pool.recycled["idle_timeout"] >= 1)
        await gone({first})
        await rig.pool.wait_ready(timeout=30)  # refilled in the background
        assert (await rig.who())["pid"] != first


async def test_without_session_close_the_process_is_reused_all_the_same(
    tmp_path: Path,
) -> None:
    async with open_rig(tmp_path, agent_config("--no-close", idle_timeout=0)) as rig:
        first, second = await rig.who(), await rig.who()
        assert first["pid"] == second["pid"]
        assert (second["open"], second["closed"]) == (2, [])  # nothing to close them with


async def test_a_run_never_waits_for_more_than_a_cold_start(tmp_path: Path) -> None:
    """Every process busy: the next run starts one itself (the pool then trims)."""
    async with open_rig(tmp_path, agent_config(idle_timeout=0)) as rig:
        (warm,) = rig.pool.pids()
        busy = await rig.start("hang")
        facts = await rig.who()  # no idle process: started cold, not queued behind `busy`
        assert facts["pid"] != warm
        await busy.dispose()
        await wait_for(lambda: rig.pool.recycled["cancelled"] == 1)
        assert rig.pool.started == 2


async def test_an_aborted_wait_does_not_waste_the_process_it_waited_for(
    tmp_path: Path,
) -> None:
    async with open_rig(tmp_path, agent_config(idle_timeout=0)) as rig:
        busy = await rig.start("hang")
        signal = AbortSignal()

        async def start() -> None:
            with pytest.raises(SubagentError) as info:
                await rig.start("who", signal=signal)
            assert info.value.code == "ABORTED"

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(start)
                await wait_for(lambda: len(rig.pool.pids()) == 1)  # the cold start began
                signal.abort("caller gave up")
        await rig.pool.wait_ready(1, timeout=30)  # it joins the pool when ready
        assert rig.pool.started == 2
        await busy.dispose()


async def test_a_changed_environment_is_not_pooled(
    rig: PoolRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    (warm,) = rig.pool.pids()
    monkeypatch.setenv("TZ", "Pacific/Chatham")  # inherited by children: now different
    facts = await rig.who()
    assert facts["pid"] != warm
    assert rig.pool.started == 1
    assert rig.pool.pids() == {warm}


async def test_an_agent_that_cannot_start_fails_the_run_with_its_words(tmp_path: Path) -> None:
    config = agent_config(idle_timeout=0).model_copy(update={"args": ["-c", "raise SystemExit(7)"]})
    before = live_children()
    async with Context.open(preset(), cwd=tmp_path) as ctx:
        rig = PoolRig(ctx, AcpProvider(config))
        with pytest.raises(SubagentError) as info:
            await rig.start("who")
        assert info.value.code == "START_FAILED"
        assert "acp-pool initialize failed: the agent exited (exit status 7)" in info.value.message
    assert live_children() - before == set()


async def test_the_pool_leaves_no_process_after_the_context_closes(tmp_path: Path) -> None:
    before = live_children()
    async with Context.open(preset(), cwd=tmp_path) as ctx:
        rig = PoolRig(ctx, AcpProvider(agent_config(size=2, idle_timeout=0)))
        await rig.pool.wait_ready(timeout=30)
        await rig.who()
        held = await rig.start("hang")  # still running when the context closes
        assert not held.settled
        pooled = process_tree(rig.pool.pids() | (live_children() - before))
        assert len(pooled) == 2  # one idle, one held by the run
    assert held.settled
    assert (await held.result).stop_reason == "aborted"
    assert not process_tree(pooled)
    assert live_children() - before == set()


async def test_the_plugin_row_warms_its_pool_at_load_and_closes_it_at_unload(
    tmp_path: Path,
) -> None:
    before = live_children()
    async with Context.open(None, cwd=tmp_path) as ctx:
        config = agent_config(idle_timeout=0).model_dump()
        await ctx.plugins.load("dsh-subagent-acp", config, id="acp-row")
        provider = SubagentRuntime.of(ctx).get_provider("acp-pool")
        assert isinstance(provider, AcpProvider)
        pool = provider.pool(ctx)
        assert pool is not None
        await pool.wait_ready(timeout=30)  # warmed at load, before any run
        pids = pool.pids()
        assert len(pids) == 1
        await ctx.plugins.unload("acp-row")
        assert pool.closed
        await gone(pids)
    assert live_children() - before == set()


async def test_a_sigkilled_parent_leaves_no_pooled_process(tmp_path: Path) -> None:
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        PARENT_SCRIPT,
        str(tmp_path),
        AGENT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None
        with anyio.fail_after(40):
            line = await parent.stdout.readline()
        info = json.loads(line)
        pooled = set(info["idle"]) | {info["held"]}
        assert len(pooled) == 3
        assert all("pool_agent.py" in cmdline(pid) for pid in pooled)
        tree = process_tree({parent.pid}) - {parent.pid}  # the agents, and the watchdog
        assert pooled <= tree
        parent.send_signal(signal.SIGKILL)
        await parent.wait()
        started = anyio.current_time()
        await gone(pooled, timeout=2.0)
        elapsed = anyio.current_time() - started
        await gone(tree, timeout=2.0)  # the watchdog exits once it has swept
        print(f"parent SIGKILLed: pooled agents gone after {elapsed:.3f} s")
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()


def test_the_pool_config_is_validated() -> None:
    with pytest.raises(ValueError, match="size"):
        agent_config(size=-1)
    with pytest.raises(ValueError, match="max_runs"):
        agent_config(max_runs=0)
    with pytest.raises(ValueError, match="extra"):
        agent_config(concurrency=2)  # one run at a time per agent process
    assert AcpProviderConfig(command="x").pool.size == 0  # off by default
    assert os.environ.get("DSH_DELEGATION_DEPTH") is None
