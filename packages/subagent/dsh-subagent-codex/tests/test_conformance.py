"""The codex provider passes the provider conformance suite, with the real codex, without
a pool and with a warm pool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh.subagent import SubagentRun, SubagentRuntime
from dsh.subagent_codex import CodexProvider
from dsh.testing import conformance, processes
from dsh.testing.conformance import (
    ConformanceHarness,
    ProviderConformance,
    assert_no_new_processes,
)

pytestmark = pytest.mark.timeout(60)


class TestCodexConformance(ProviderConformance):
    """Complete = a text reply; hang = the model server never answers; fail = HTTP 500."""

    @pytest.fixture
    async def harness(self, codex: Any) -> AsyncIterator[ConformanceHarness]:
        server = codex.server

        async def wait_until_running(run: SubagentRun) -> None:
            # a hanging model request is open at the server: codex is mid-turn
            def hanging() -> bool:
                return any(not r.client_disconnected for r in server.matching("hang"))

            await server.async_wait_until(hanging, 30)

        async with codex.context() as (ctx, parent):
            yield ConformanceHarness(
                ctx,
                "codex",
                parent,
                complete_prompt="please say hello",
                expected_output=codex.hello,
                hang_prompt="hang until cancelled",
                fail_prompt="fail with a server error",
                cancel_bound=2.0,
                wait_until_running=wait_until_running,
            )


class TestCodexConformancePooled(ProviderConformance):
    """The same with a warm pool of one app-server (a thread per run on it).

    The app-servers the pool holds and no run uses (idle, starting, being recycled in
    the background) are the pool's, not a run's: the suite's "no child process is
    left" checks leave them out; once the context is closed nothing may be left."""

    @pytest.fixture
    async def harness(
        self, codex: Any, monkeypatch: pytest.MonkeyPatch
    ) -> AsyncIterator[ConformanceHarness]:
        server = codex.server
        before = processes.live_children()

        async def wait_until_running(run: SubagentRun) -> None:
            def hanging() -> bool:
                return any(not r.client_disconnected for r in server.matching("hang"))

            await server.async_wait_until(hanging, 30)

        async with codex.context(pool={"size": 1}) as (ctx, parent):
            provider = SubagentRuntime.of(ctx).get_provider("codex")
            assert isinstance(provider, CodexProvider)
            pool = provider.pool(ctx)
            assert pool is not None
            await pool.wait_ready(timeout=30)
            monkeypatch.setattr(
                conformance, "live_children", lambda: processes.live_children() - pool.pids()
            )
            yield ConformanceHarness(
                ctx,
                "codex",
                parent,
                complete_prompt="please say hello",
                expected_output=codex.hello,
                hang_prompt="hang until cancelled",
                fail_prompt="fail with a server error",
                cancel_bound=2.0,
                wait_until_running=wait_until_running,
            )
        monkeypatch.undo()
        assert_no_new_processes(before, within=5.0)
