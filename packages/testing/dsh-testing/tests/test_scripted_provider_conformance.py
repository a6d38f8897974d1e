"""The scripted provider passes the provider conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dsh.core import Context, parse_preset
from dsh.subagent import SubagentRuntime
from dsh.testing.conformance import ConformanceHarness, ProviderConformance
from dsh.testing.scripted_provider import FAIL_PROMPT, HANG_PROMPT, ScriptedProvider

pytestmark = pytest.mark.timeout(20)


class TestScriptedProviderConformance(ProviderConformance):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[ConformanceHarness]:
        async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
            SubagentRuntime.of(ctx).register_provider(ScriptedProvider("scripted", reply="hello"))
            yield ConformanceHarness(
                ctx,
                "scripted",
                ctx.agents.create(),
                complete_prompt="say hello",
                expected_output="hello",
                hang_prompt=HANG_PROMPT,
                fail_prompt=FAIL_PROMPT,
                cancel_bound=1.0,
            )
