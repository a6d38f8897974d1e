"""The ``fork`` provider through the fault matrix (:mod:`dsh.testing.faults`; the
harness is :func:`dsh.testing.fixtures.in_process_faults`). The parent finishes a turn
first, so every child is seeded with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.testing.fixtures import in_process_fault_matrix

pytestmark = pytest.mark.timeout(60)

TOOL = f"{Path(__file__).with_name('fault_matrix_tool.py')}:install"

TestForkFaults = in_process_fault_matrix(
    "fork",
    "dsh-subagent-fork-in-process",
    setup=TOOL,
    seed_turn="a completed turn the child is seeded with",
)
