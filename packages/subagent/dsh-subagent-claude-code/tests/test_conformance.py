"""The provider conformance suite, run against the real Claude Code CLI."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from dsh.subagent import SubagentRun
from dsh.testing.conformance import ConformanceHarness, ProviderConformance
from dsh.testing.model_servers import Hang, HTTPError

if TYPE_CHECKING:
    from conftest import Setup

pytestmark = pytest.mark.timeout(90)


class TestClaudeCodeConformance(ProviderConformance):
    """Complete → text reply; hang → the model server never answers; fail → HTTP 500."""

    @pytest.fixture
    async def harness(self, setup: Setup) -> ConformanceHarness:
        server = setup.server
        server.when("DSH-CONFORMANCE-COMPLETE", "conformance complete")
        server.when("DSH-CONFORMANCE-HANG", Hang())
        server.when("DSH-CONFORMANCE-FAIL", HTTPError(500, "conformance failure"))
        seen = 0

        async def until_the_model_was_asked(run: SubagentRun) -> None:
            nonlocal seen
            while len(server.matching("DSH-CONFORMANCE-HANG")) <= seen:
                await anyio.sleep(0.01)
            seen += 1

        return ConformanceHarness(
            setup.ctx,
            setup.provider.name,
            setup.parent,
            complete_prompt="DSH-CONFORMANCE-COMPLETE",
            expected_output="conformance complete",
            hang_prompt="DSH-CONFORMANCE-HANG",
            fail_prompt="DSH-CONFORMANCE-FAIL",
            cancel_bound=1.0,
            wait_until_running=until_the_model_was_asked,
        )
