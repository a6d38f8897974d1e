"""The ``fork`` provider, loaded through its entry point, passes the conformance suite
and is registered with all four start capabilities, inheriting the parent's context."""

from __future__ import annotations

import pytest

from dsh.testing.fixtures import in_process_conformance_suite

pytestmark = pytest.mark.timeout(20)

PLUGIN = "dsh-subagent-fork-in-process"

TestForkConformance = in_process_conformance_suite("fork", PLUGIN, inherits_parent_context=True)
