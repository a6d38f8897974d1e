"""The ``spawn`` provider, loaded through its entry point, passes the conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dsh.core import Context, parse_preset
from dsh.subagent import ALL_START_CAPABILITIES, SubagentRuntime
from dsh.testing.conformance import ConformanceHarness, ProviderConformance
from dsh.testing.scripting import prompt_behaviour_model

pytestmark = pytest.mark.timeout(20)

PRESET = parse_preset(
    '[agent.model]\nadapter = "scripted"\n[[plugin]]\nname = "dsh-subagent-spawn-in-process"\n'
)


class TestSpawnConformance(ProviderConformance):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[ConformanceHarness]:
        async with Context.open(PRESET) as ctx:
            parent = ctx.agents.create(model=prompt_behaviour_model(reply="child says: {prompt}"))
            await parent.run("a completed turn before delegating")
            yield ConformanceHarness(
                ctx,
                "spawn",
                parent,
                complete_prompt="summarise",
                expected_output="child says: summarise",
                hang_prompt="hang",
                fail_prompt="fail",
                cancel_bound=1.0,
            )


@pytest.mark.anyio
async def test_registered_with_all_four_capabilities() -> None:
    async with Context.open(PRESET) as ctx:
        provider = SubagentRuntime.of(ctx).get_provider("spawn")
        assert provider is not None
        assert provider.capabilities == ALL_START_CAPABILITIES
        assert provider.inherits_parent_context is False
