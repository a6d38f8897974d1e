"""The ``spawn`` provider through the fault matrix (:mod:`dsh.testing.faults`; the
harness is :func:`dsh.testing.fixtures.in_process_faults`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dsh.testing.faults import Fault, FaultHarness, FaultMatrix
from dsh.testing.fixtures import in_process_faults

pytestmark = pytest.mark.timeout(60)

TOOL = f"{Path(__file__).with_name('fault_matrix_tool.py')}:install"


class TestSpawnFaults(FaultMatrix):
    @pytest.fixture
    async def fault_harness(self, fault: Fault, tmp_path: Path) -> AsyncIterator[FaultHarness]:
        plugin = "dsh-subagent-spawn-in-process"
        async with in_process_faults(fault, "spawn", plugin, tmp_path, setup=TOOL) as harness:
            yield harness
