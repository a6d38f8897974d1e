"""The ``spawn`` provider through the fault matrix (:mod:`dsh.testing.faults`; the
harness is :func:`dsh.testing.fixtures.in_process_faults`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.testing.fixtures import in_process_fault_matrix

pytestmark = pytest.mark.timeout(60)

TOOL = f"{Path(__file__).with_name('fault_matrix_tool.py')}:install"

TestSpawnFaults = in_process_fault_matrix("spawn", "dsh-subagent-spawn-in-process", setup=TOOL)
