"""The acp provider passes the provider conformance suite, twice: driving the mock
ACP agent, and driving a real ``dsh acp`` child process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh.testing.conformance import ConformanceHarness, ProviderConformance

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
        return ConformanceHarness(
            rig.ctx,
            rig.register(config),
            rig.parent,
            complete_prompt="say hello",
            expected_output="Done: say hello",
            hang_prompt="please hang",
            fail_prompt="please fail",
            cancel_bound=5.0,
            start_signal_grace=0.3,
        )
