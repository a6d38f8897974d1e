"""Warm pools of ``codex app-server`` processes (issue 15), with the real codex.

A pooled run takes a handshaken app-server and starts its own ephemeral thread on
it; these tests check the reuse, the recycling, the routing of concurrent threads,
and that no process is left (context closed, parent killed).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Agent, Context
from dsh.subagent import SubagentResult, SubagentRun, SubagentRuntime, SubagentStartRequest
from dsh.subagent_codex import CodexConfig, CodexProvider
from dsh.subagent_codex._appserver import CodexAppServer
from dsh.subprocess import ProcessPool
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.model_servers import FunctionCall, ResponsesReply, reply_with_tool_output
from dsh.testing.processes import alive, live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

WHERE = "show where you are"
WHERE_COMMAND = "echo cwd=$(pwd) depth=$DSH_DELEGATION_DEPTH parent=$DSH_PARENT_SESSION"


class Pooled:
    """A context with the codex provider and a warm pool, and a parent agent."""

    def __init__(self, ctx: Context, parent: Agent) -> None:
        self.ctx = ctx
        self.parent = parent
        self.runtime = SubagentRuntime.of(ctx)
        provider = self.runtime.get_provider("codex")
        assert isinstance(provider, CodexProvider)
        pool = provider.pool(ctx)
        assert pool is not None
        self.pool: ProcessPool[CodexAppServer] = pool

    async def start(
        self, prompt: str, parent: Agent | None = None, signal: AbortSignal | None = None
    ) -> SubagentRun:
        request = SubagentStartRequest(prompt, parent or self.parent, signal or AbortSignal())
        return await self.runtime.start("codex", request)

    async def run(self, prompt: str, parent: Agent | None = None) -> tuple[str, SubagentResult]:
        """(run id, result) of a run, disposed."""
        run = await self.start(prompt, parent)
        async with run:
            with anyio.fail_after(30):
                return run.id, await run.result

    def server_pid(self) -> int:
        """The pid of the one idle app-server."""
        (server,) = self.pool.idle
        return server.pid


@asynccontextmanager
async def pooled(codex: Any, preset_text: str = "", **pool: Any) -> AsyncIterator[Pooled]:
    pool.setdefault("size", 1)
    pool.setdefault("idle_timeout", 0)
    async with codex.context(preset_text, permission_mode="full-access", pool=pool) as (
        ctx,
        parent,
    ):
        rig = Pooled(ctx, parent)
        await rig.pool.wait_ready(timeout=30)
        yield rig


async def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def test_a_pooled_run_reuses_the_app_server_with_a_fresh_thread_in_its_own_cwd(
    codex: Any, procs: Any, tmp_path: Path
) -> None:
    codex.server.when(
        WHERE,
        ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": WHERE_COMMAND})]),
        reply_with_tool_output("Tool said: {output}"),
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # unsandboxed: a sandboxed app-server can only write the cwd it was started in
    # (test_a_run_in_another_cwd_does_not_take_the_sandboxed_app_server)
    async with pooled(codex, '[sandbox]\nmode = "off"\n') as rig:
        warm = rig.server_pid()
        other = rig.ctx.agents.create(meta={"cwd": str(elsewhere)})
        first_id, first = await rig.run(WHERE)
        assert rig.server_pid() == warm
        second_id, second = await rig.run(WHERE, other)
        assert rig.server_pid() == warm
        # same parent again: the thread the app-server started ahead for it
        third_id, third = await rig.run(WHERE, other)
        assert procs.codex() == {warm}  # no other app-server ran
        assert rig.pool.started == 1
    assert first.stop_reason == second.stop_reason == "completed", (first, second)
    assert len({first_id, second_id, third_id}) == 3  # codex-<thread id>: a thread per run
    # each thread ran in its run's cwd; the depth variables reached its commands
    # through the thread's config (the shared process has none of its own)
    assert f"cwd={codex.workspace} depth=1 parent={rig.parent.id}" in first.output
    assert f"cwd={elsewhere} depth=1 parent={other.id}" in second.output
    assert f"cwd={elsewhere} depth=1 parent={other.id}" in third.output
    assert third.stop_reason == "completed"


async def test_a_run_in_another_cwd_does_not_take_the_sandboxed_app_server(
    codex: Any, tmp_path: Path
) -> None:
    codex.server.when(
        WHERE,
        ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": WHERE_COMMAND})]),
        reply_with_tool_output("Tool said: {output}"),
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with pooled(codex) as rig:
        warm = rig.server_pid()
        other = rig.ctx.agents.create(meta={"cwd": str(elsewhere)})
        _, here = await rig.run(WHERE)
        (process,) = rig.pool.idle
        _, there = await rig.run(WHERE, other)  # an app-server of its own, sandboxed there
        assert (rig.server_pid(), process.runs, rig.pool.started) == (warm, 1, 1)
    assert f"cwd={codex.workspace} depth=1" in here.output
    assert f"cwd={elsewhere} depth=1" in there.output


async def test_a_crash_mid_run_settles_that_run_and_the_app_server_is_replaced(
    codex: Any,
) -> None:
    async with pooled(codex) as rig:
        warm = rig.server_pid()
        run = await rig.start("hang until killed")
        await codex.server.async_wait_until(
            lambda: bool(codex.server.matching("hang until killed")), timeout=30
        )
        os.kill(warm, signal.SIGKILL)
        async with run:
            with anyio.fail_after(10):
                result = await run.result
        assert result.stop_reason == "error"
        assert "codex app-server exited (killed by SIGKILL)" in (result.diagnostic or "")
        await rig.pool.wait_ready(timeout=30)
        _, after = await rig.run("please say hello")
        assert after.output == codex.hello
        assert rig.server_pid() != warm
        assert rig.pool.recycled["exited"] + rig.pool.recycled["error"] == 1


async def test_cancel_recycles_the_app_server(codex: Any) -> None:
    async with pooled(codex) as rig:
        warm = rig.server_pid()
        abort = AbortSignal()
        run = await rig.start("hang until cancelled", signal=abort)
        await codex.server.async_wait_until(
            lambda: bool(codex.server.matching("hang until cancelled")), timeout=30
        )
        abort.abort("parent cancelled")
        async with run:
            with anyio.fail_after(10):
                result = await run.result
        assert result.stop_reason == "aborted"
        assert not alive(warm)  # dispose waited for the cancelled app-server to go
        assert rig.pool.recycled["cancelled"] == 1
        await rig.pool.wait_ready(timeout=30)
        assert rig.server_pid() != warm
        _, after = await rig.run("please say hello")
        assert after.output == codex.hello


async def test_a_failed_turn_recycles_the_app_server(codex: Any) -> None:
    async with pooled(codex) as rig:
        warm = rig.server_pid()
        _, result = await rig.run("fail with a server error")
        assert result.stop_reason == "error"
        assert not alive(warm)
        assert rig.pool.recycled["error"] == 1


async def test_max_runs_and_idle_timeout_recycle_the_app_server(codex: Any) -> None:
    async with pooled(codex, max_runs=2, idle_timeout=1.0) as rig:
        pids = []
        for _ in range(3):
            await rig.pool.wait_ready(timeout=30)
            pids.append(rig.server_pid())
            _, result = await rig.run("please say hello")
            assert result.output == codex.hello
        assert pids[0] == pids[1] != pids[2]
        assert rig.pool.recycled["max_runs"] == 1
        await wait_for(lambda: rig.pool.recycled["idle_timeout"] >= 1)
        await wait_for(lambda: not alive(pids[2]))
        await rig.pool.wait_ready(timeout=30)  # a fresh one replaced it
        assert rig.server_pid() not in pids


async def test_concurrent_runs_share_one_app_server_each_with_its_own_thread(
    codex: Any,
) -> None:
    async with pooled(codex, concurrency=2) as rig:
        warm = rig.server_pid()
        abort = AbortSignal()
        hanging = await rig.start("hang while the other answers", signal=abort)
        await codex.server.async_wait_until(
            lambda: bool(codex.server.matching("hang while the other answers")), timeout=30
        )
        hello_id, hello = await rig.run("please say hello")
        assert hello.output == codex.hello  # its own thread's messages only
        assert hello_id != hanging.id
        assert not hanging.settled
        assert rig.pool.started == 1
        abort.abort("done")
        async with hanging:
            with anyio.fail_after(10):
                assert (await hanging.result).stop_reason == "aborted"
        assert not alive(warm)  # cancelled: recycled once its last run let go


async def test_a_run_with_a_trace_context_is_not_pooled(codex: Any, procs: Any) -> None:
    class Traced:
        def headers(self, span: str | None = None) -> dict[str, str]:
            return {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

    async with pooled(codex) as rig:
        warm = rig.server_pid()
        rig.ctx.tracing = Traced()  # type: ignore[assignment]
        run = await rig.start("please say hello")
        own = procs.codex() - {warm}
        assert own  # its own app-server: the pooled one has no TRACEPARENT
        async with run:
            with anyio.fail_after(30):
                assert (await run.result).output == codex.hello
        assert rig.pool.started == 1
        assert rig.server_pid() == warm


async def test_the_pool_leaves_no_process_after_the_context_closes(codex: Any, procs: Any) -> None:
    before = live_children()
    async with pooled(codex, size=2) as rig:
        await rig.run("please say hello")
        held = await rig.start("hang until the context closes")
        await codex.server.async_wait_until(
            lambda: bool(codex.server.matching("hang until the context closes")), timeout=30
        )
        servers = procs.codex()
        assert len(servers) == 2
    assert held.settled
    assert (await held.result).stop_reason == "aborted"
    assert not procs.tree(servers)
    assert_no_new_processes(before, within=3.0)  # a sandbox's inner processes die last


async def test_a_sigkilled_parent_leaves_no_pooled_app_server(
    codex: Any, procs: Any, tmp_path: Path
) -> None:
    config_file = tmp_path / "config.json"
    config = codex.config(permission_mode="full-access", pool={"size": 2, "idle_timeout": 0})
    config_file.write_text(json.dumps(CodexConfig(**config).model_dump()))
    script = Path(__file__).with_name("delegate_forever.py")
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        str(config_file),
        str(codex.workspace),
        "run sleep",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None
        assert await asyncio.wait_for(parent.stdout.readline(), 40) == b"published\n"
        await procs.wait_for(
            lambda: any("sleep 300" in " ".join(_cmd(p)) for p in procs.tree({parent.pid})),
            timeout=30,
        )
        # one held by the run, one idle (waited for: a moment of a third codex process,
        # one of codex's own re-executions or a start still settling, is no failure)
        await procs.wait_for(lambda: len(procs.codex() & procs.tree({parent.pid})) == 2, timeout=30)
        tree = procs.tree({parent.pid}) - {parent.pid}
        parent.send_signal(signal.SIGKILL)
        await parent.wait()
        started = time.monotonic()
        await procs.wait_gone(procs.codex() & tree, timeout=2.0)
        gone_after = time.monotonic() - started
        await procs.wait_gone(tree, timeout=2.0)  # the tool and the watchdog too
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()
    print(f"parent SIGKILLed: pooled app-servers gone after {gone_after * 1000:.0f} ms")


def _cmd(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def test_pools_are_off_by_default_and_validated() -> None:
    assert CodexConfig().pool.size == 0
    assert CodexConfig(pool={"size": 2, "concurrency": 4}).pool.concurrency == 4
    with pytest.raises(ValueError, match="concurrency"):
        CodexConfig(pool={"size": 1, "concurrency": 0})
    with pytest.raises(ValueError, match="extra"):
        CodexConfig(pool={"size": 1, "warm": True})
