"""Budgets over ACP: a run with a budget needs an agent that enforces it (``dsh acp``
confirms ``_meta.dsh.budget``); a third-party agent is refused at start, leaving
nothing running; a ``dsh acp`` child stops at its budget and the run settles
``budget`` with the cap's diagnostic (the looping case across ``dsh run``: dsh-cli's
``test_budget_flags``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.subagent import Budget, UnsupportedCapability
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

LOOP = """
[[agent.model.options.replies]]
text = "reading {n}"
tool_calls = [{ name = "read_file", arguments = { path = "notes.txt" } }]
"""
LOOPING_CHILD = 'extends = "standard"\n[agent.model]\nadapter = "scripted"\n' + "".join(
    LOOP.replace("{n}", str(n)) for n in range(20)
)


async def test_a_provider_without_budget_true_refuses_a_budget(rig: Any) -> None:
    with pytest.raises(UnsupportedCapability, match='"budget" capability'):
        await rig.start_on(rig.register(rig.mock("normal")), "hi", budget=Budget(tokens=10))


async def test_an_agent_that_does_not_confirm_the_budget_is_refused(rig: Any) -> None:
    config = rig.mock("normal", budget=True, name="acp-third-party")
    before = live_children()
    with pytest.raises(UnsupportedCapability, match=r"_meta\.dsh\.budget"):
        await rig.start_on(rig.register(config), "hi", budget=Budget(tokens=10))
    assert_no_new_processes(before)
    # without a budget the same agent runs as before
    result = await rig.run(config, "hello")
    assert result.stop_reason == "completed", result


async def test_a_dsh_acp_child_stops_at_its_turn_budget(rig: Any, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("notes\n")
    preset = tmp_path / "child.toml"
    preset.write_text(LOOPING_CHILD)
    config = rig.dsh(preset, budget=True, depth_limit=True)
    before = live_children()
    run = await rig.start_on(rig.register(config), "go", budget=Budget(turns=3, seconds=60))
    async with run:
        with anyio.fail_after(60):
            result = await run.result
    assert result.stop_reason == "budget", result
    assert result.diagnostic == "turn budget 3 reached: 3 model calls made"
    assert result.output == "reading 2"  # the third call's text, and no fourth call
    assert_no_new_processes(before)
