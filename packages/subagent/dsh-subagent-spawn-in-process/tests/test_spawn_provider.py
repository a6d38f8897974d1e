"""The ``spawn`` provider, loaded through its entry point, passes the conformance suite
and is registered with all four start capabilities, not inheriting the parent's context."""

from __future__ import annotations

import pytest

from dsh.testing.fixtures import in_process_conformance_suite

pytestmark = pytest.mark.timeout(20)

PLUGIN = "dsh-subagent-spawn-in-process"

TestSpawnConformance = in_process_conformance_suite("spawn", PLUGIN, inherits_parent_context=False)
