"""The ``spawn`` provider, loaded through its entry point, passes the conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dsh.core import Context, parse_preset
from dsh.subagent import ALL_START_CAPABILITIES, SubagentRuntime
from dsh.testing.conformance import ConformanceHarness, ProviderConformance
from dsh.testing.fixtures import SCRIPTED_PRESET, in_process_conformance, plugin_rows

pytestmark = pytest.mark.timeout(20)

PLUGIN = "dsh-subagent-spawn-in-process"


class TestSpawnConformance(ProviderConformance):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[ConformanceHarness]:
        async with in_process_conformance("spawn", PLUGIN) as harness:
            yield harness


@pytest.mark.anyio
async def test_registered_with_all_four_capabilities() -> None:
    async with Context.open(parse_preset(SCRIPTED_PRESET + plugin_rows(PLUGIN))) as ctx:
        provider = SubagentRuntime.of(ctx).get_provider("spawn")
        assert provider is not None
        assert provider.capabilities == ALL_START_CAPABILITIES
        assert provider.inherits_parent_context is False
