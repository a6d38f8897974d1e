"""The codex provider passes the provider conformance suite, with the real codex."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dsh.subagent import SubagentRun
from dsh.testing.conformance import ConformanceHarness, ProviderConformance

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
