"""The echo provider passes the provider conformance suite (this region is shown in
docs/writing-a-provider.md; a test keeps the two identical)."""

from __future__ import annotations

# --8<-- [start:conformance]
from collections.abc import AsyncIterator

import pytest

from dsh.core import Context, parse_preset
from dsh.testing.conformance import ConformanceHarness, ProviderConformance

ECHO = parse_preset("""
[agent.model]
adapter = "scripted"  # the parent never runs a turn here; it only delegates

[[plugin]]
name = "dsh-subagent-example-echo"
""")


class TestEchoConformance(ProviderConformance):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[ConformanceHarness]:
        async with Context.open(ECHO) as ctx:
            yield ConformanceHarness(
                ctx,
                "echo",
                ctx.agents.create(),
                complete_prompt="say hi",
                expected_output="say hi",
                hang_prompt="hang",  # the child works on it until cancelled
                fail_prompt="fail",  # the child exits with a message on stderr
                cancel_bound=5.0,
            )


# --8<-- [end:conformance]
