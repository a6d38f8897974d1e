"""Budgets over A2A: the remainder travels to a ``dsh a2a`` server in the message
metadata (``metadata.dsh.budget``); the served agent stops its tree at the cap and the
task fails with ``metadata.dsh.stopReason = "budget"``, which the parent maps to stop
reason ``budget``; an agent whose card does not declare the budget is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.subagent import Budget, UnsupportedCapability
from dsh.testing.fixtures import SPAWN_SUBAGENT_TOOL

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

LOOP = """
[[agent.model.options.replies]]
text = "trying {n}"
tool_calls = [{ name = "no_such_tool", arguments = {} }]
"""
# the spawn rows load the subagent runtime, which enforces the budget in dsh a2a
LOOPING = (
    '[agent.model]\nadapter = "scripted"\n'
    + "".join(LOOP.replace("{n}", str(n)) for n in range(20))
    + SPAWN_SUBAGENT_TOOL
)


async def test_a_dsh_a2a_child_stops_at_its_turn_budget(rig: Any, tmp_path: Path, kit: Any) -> None:
    preset = tmp_path / "served.toml"
    preset.write_text(LOOPING)
    server = kit.start_dsh_a2a(tmp_path, preset)
    try:
        name = rig.register(server.url, depth_limit=True, budget=True)
        run = await rig.start(name, "loop", budget=Budget(turns=3, seconds=60))
        async with run:
            with anyio.fail_after(60):
                result = await run.result
    finally:
        assert server.stop() == 143
    assert result.stop_reason == "budget", result
    assert result.diagnostic == "turn budget 3 reached: 3 model calls made"


async def test_an_agent_without_the_budget_extension_is_refused(rig: Any, sdk_agent: Any) -> None:
    name = rig.register(sdk_agent.url, budget=True, name="a2a-sdk-budget")
    with pytest.raises(UnsupportedCapability, match=r"params\.budget = true"):
        await rig.start(name, "hi", budget=Budget(tokens=10))
