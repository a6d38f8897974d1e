"""The acp provider passes the provider conformance suite, driving the mock ACP agent
and a real ``dsh acp`` child process, each without a pool and with a warm pool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from dsh.core import Agent, Context
from dsh.subagent import SubagentRuntime
from dsh.subagent_acp import AcpProvider, AcpProviderConfig
from dsh.testing import conformance, processes
from dsh.testing.conformance import (
    ConformanceHarness,
    ProviderConformance,
    assert_no_new_processes,
)
from dsh.testing.fixtures import keyed_conformance, scripted_context

pytestmark = pytest.mark.timeout(120)


class TestAcpProviderWithMockAgent(ProviderConformance):
    """Mock agent in ``by-prompt`` mode: ``hang`` honours cancel, ``crash`` exits 3."""

    @pytest.fixture
    async def harness(self, rig: Any) -> ConformanceHarness:
        config = rig.mock("by-prompt", name="acp", eof_grace=1.0, term_grace=1.0, cancel_grace=2.0)
        return ConformanceHarness(
            rig.ctx,
            rig.register(config),
            rig.parent,
            complete_prompt="normal hi there",
            expected_output="You said: hi there",
            hang_prompt="hang",
            fail_prompt="crash",
            cancel_bound=5.0,
            start_signal_grace=0.3,
        )


class TestAcpProviderWithDshAcp(ProviderConformance):
    """A real ``dsh acp`` child on a prompt-keyed scripted model."""

    @pytest.fixture
    async def harness(self, rig: Any, keyed_child_preset: Path) -> ConformanceHarness:
        config = rig.dsh(keyed_child_preset, name="acp", eof_grace=2.0, cancel_grace=3.0)
        return keyed_conformance(rig.ctx, rig.register(config), rig.parent)


@asynccontextmanager
async def pooled(
    tmp_path: Path, config: AcpProviderConfig, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Context, Agent]]:
    """A context whose provider has a warm pool, for the suite with pooling on.

    The processes the pool holds and no run uses (idle, starting, being recycled in
    the background) are the pool's, not a run's: the suite's "no child process is
    left" checks leave them out (a run's own process, and any process a run still
    holds, still count). Once the context is closed, nothing at all may be left."""
    before = processes.live_children()
    async with scripted_context(tmp_path) as ctx:
        provider = AcpProvider(config)
        SubagentRuntime.of(ctx).register_provider(provider)
        pool = provider.pool(ctx)
        assert pool is not None
        await pool.wait_ready(timeout=60)
        monkeypatch.setattr(
            conformance, "live_children", lambda: processes.live_children() - pool.pids()
        )
        yield ctx, ctx.agents.create()
    monkeypatch.undo()
    assert_no_new_processes(before, within=5.0)
    assert pool.started >= 1


class TestAcpProviderPooledWithMockAgent(ProviderConformance):
    """The mock agent (``by-prompt``) behind a warm pool of two processes."""

    @pytest.fixture
    async def harness(
        self, tmp_path: Path, configs: Any, monkeypatch: pytest.MonkeyPatch
    ) -> AsyncIterator[ConformanceHarness]:
        config = configs.mock(
            "by-prompt",
            name="acp",
            eof_grace=1.0,
            term_grace=1.0,
            cancel_grace=2.0,
            pool={"size": 2},
        )
        async with pooled(tmp_path, config, monkeypatch) as (ctx, parent):
            yield ConformanceHarness(
                ctx,
                "acp",
                parent,
                complete_prompt="normal hi there",
                expected_output="You said: hi there",
                hang_prompt="hang",
                fail_prompt="crash",
                cancel_bound=5.0,
                start_signal_grace=0.3,
            )


class TestAcpProviderPooledWithDshAcp(ProviderConformance):
    """Real ``dsh acp`` children behind a warm pool (``session/close`` between runs)."""

    @pytest.fixture
    async def harness(
        self,
        tmp_path: Path,
        keyed_child_preset: Path,
        configs: Any,
        monkeypatch: pytest.MonkeyPatch,
    ) -> AsyncIterator[ConformanceHarness]:
        config = configs.dsh(
            keyed_child_preset, name="acp", eof_grace=2.0, cancel_grace=3.0, pool={"size": 1}
        )
        async with pooled(tmp_path, config, monkeypatch) as (ctx, parent):
            yield keyed_conformance(ctx, "acp", parent)
