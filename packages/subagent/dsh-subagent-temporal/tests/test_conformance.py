"""The temporal provider passes the provider conformance suite: a parent in this
process, a dev server and a ``dsh worker`` process running spawn children on a
prompt-keyed scripted model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.conformance import ConformanceHarness, ProviderConformance
from dsh.testing.fixtures import keyed_conformance

pytestmark = pytest.mark.timeout(60)


class TestTemporalProvider(ProviderConformance):
    """Hang: the child's model never answers until cancelled; fail: its model errors."""

    @pytest.fixture
    async def harness(
        self, tk: Any, server: Any, queue: str, worker: Any, tmp_path: Path
    ) -> AsyncIterator[ConformanceHarness]:
        config = tk.provider_config(server, queue)
        async with tk.parent_context(config, tmp_path) as (ctx, provider):
            yield keyed_conformance(
                ctx,
                provider.name,
                ctx.agents.create(),
                cancel_bound=tk.HEARTBEAT_TIMEOUT + 2,
                start_signal_grace=0.5,
                run_bound=30,
            )
