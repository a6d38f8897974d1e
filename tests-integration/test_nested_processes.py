"""Delegation chains across processes: the depth limit travels with them, and tearing
the outer run down reaches the grandchildren (issue 10: items 2 and 7).

Real ``dsh acp`` children through the real plugin loader; the grandchild is the mock
ACP agent, which starts a process in a session of its own (as agent products do for
tool commands)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
import pytest

from dsh.core import AbortSignal, Context, last_output, parse_preset
from dsh.subagent import SubagentStartRequest
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.processes import cmdline, descendants, live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

DSH_ACP = [sys.executable, "-m", "dsh.cli", "acp", "--preset"]


def acp_rows(command: list[str], *, tool_max_depth: object, depth_limit: bool) -> str:
    return f"""
[[plugin]]
name = "dsh-subagent-acp"
[plugin.config]
command = {json.dumps(command[0])}
args = {json.dumps(command[1:])}
depth_limit = {json.dumps(depth_limit)}
eof_grace = 2.0
term_grace = 2.0

[[plugin]]
name = "dsh-tool-subagent"
[plugin.config]
provider = "acp"
tool_name = "subagent_acp"
max_depth = {json.dumps(tool_max_depth)}
"""


RECURSE_MODEL = """
[[plugin]]
name = "dsh-testing-keyed-model"

[agent.model]
adapter = "keyed"
[[agent.model.options.default]]
[[agent.model.options.default.tool_calls]]
name = "subagent_acp"
arguments = { description = "go deeper", prompt = "recurse" }
[[agent.model.options.default]]
text = "level done <{tool_results}>"
"""


async def test_a_recursion_bomb_across_processes_stops_at_max_depth(tmp_path: Path) -> None:
    """Every level is a `dsh acp` whose own tool allows depth 10; the lead allows 3.
    The inherited limit travels in _meta.dsh, so the chain stops at depth 3."""
    child = tmp_path / "child.toml"
    child.write_text(
        RECURSE_MODEL + acp_rows([*DSH_ACP, str(child)], tool_max_depth=10, depth_limit=True)
    )
    lead = parse_preset(
        RECURSE_MODEL + acp_rows([*DSH_ACP, str(child)], tool_max_depth=3, depth_limit=True)
    )
    before = live_children()
    started = time.monotonic()
    async with Context.open(lead, cwd=tmp_path) as ctx:
        agent = ctx.agents.create()
        with anyio.fail_after(90):
            outcome = await agent.run("recurse")
        output = last_output(agent.session.events)
    assert outcome.stop_reason == "completed", outcome.error
    assert output.count("level done") == 4  # the lead and three dsh acp levels
    assert "subagent depth 4 exceeds max_depth 3" in output
    assert time.monotonic() - started < 90
    assert_no_new_processes(before, within=2.0)


GRANDCHILD_HANG = [
    sys.executable,
    "-m",
    "dsh.testing.mock_acp_agent",
    "--mode",
    "hang",
    "--escapee",
]


def _nested_presets(tmp_path: Path) -> str:
    child = tmp_path / "child.toml"
    child.write_text(
        """
[[plugin]]
name = "dsh-testing-keyed-model"

[agent.model]
adapter = "keyed"
[[agent.model.options.default]]
[[agent.model.options.default.tool_calls]]
name = "subagent_acp"
arguments = { description = "hang below", prompt = "hang" }
[[agent.model.options.default]]
text = "child done"
"""
        + acp_rows(GRANDCHILD_HANG, tool_max_depth="provider-managed", depth_limit=False)
    )
    return """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
[[agent.model.options.replies.tool_calls]]
name = "subagent_acp"
arguments = { description = "delegate", prompt = "go" }
[[agent.model.options.replies]]
text = "lead done"
""" + acp_rows([*DSH_ACP, str(child)], tool_max_depth="provider-managed", depth_limit=True)


async def _wait_for_escapee(before: set[int]) -> None:
    """Until the grandchild's process in its own session runs (`sleep` of the mock)."""
    with anyio.fail_after(60):
        while True:
            tree = set()
            for pid in live_children() - before:
                tree |= {pid, *descendants(pid)}
            if any("time.sleep(120)" in cmdline(pid) for pid in tree | live_children()):
                return
            await anyio.sleep(0.05)


@pytest.mark.parametrize("path", ["agent.cancel", "context close", "dispose"])
async def test_tearing_down_the_outer_run_reaches_the_grandchildren(
    tmp_path: Path, path: str
) -> None:
    before = live_children()
    async with Context.open(parse_preset(_nested_presets(tmp_path)), cwd=tmp_path) as ctx:
        lead = ctx.agents.create()
        if path == "dispose":
            run = await ctx.subagents.start(
                "acp", SubagentStartRequest("go", lead, AbortSignal(), max_depth=3)
            )
            await _wait_for_escapee(before)
            started = time.monotonic()
            await run.dispose()
        else:
            lead.followup("go")
            await _wait_for_escapee(before)
            started = time.monotonic()
            if path == "agent.cancel":
                lead.cancel("the user pressed stop")
                with anyio.fail_after(15):
                    await lead.when_idle()
    elapsed = time.monotonic() - started
    assert elapsed < 8.0, f"{path} took {elapsed:.1f} s"
    assert_no_new_processes(before, within=2.0)


async def test_provider_managed_depth_still_has_a_ceiling_across_processes(
    tmp_path: Path,
) -> None:
    """Every level is a `dsh acp` with the same preset and `max_depth = "provider-managed"`
    (as the docs write an acp row): without a ceiling this recursed without end (issue 21
    item 1). The default ceiling travels with the chain: it stops at depth 5, and the
    refusal reaches the deepest model as a tool error."""
    from dsh.subagent.kit import DEFAULT_MAX_DEPTH

    same = tmp_path / "same.toml"
    same.write_text(
        RECURSE_MODEL
        + acp_rows([*DSH_ACP, str(same)], tool_max_depth="provider-managed", depth_limit=False)
    )
    before = live_children()
    async with Context.open(parse_preset(same.read_text()), cwd=tmp_path) as ctx:
        agent = ctx.agents.create()
        with anyio.fail_after(150):
            outcome = await agent.run("recurse")
        output = last_output(agent.session.events)
    assert outcome.stop_reason == "completed", outcome.error
    assert output.count("level done") == DEFAULT_MAX_DEPTH + 1  # the lead and five levels
    depth = DEFAULT_MAX_DEPTH + 1
    assert f"subagent depth {depth} exceeds max_depth {DEFAULT_MAX_DEPTH}" in output
    assert_no_new_processes(before, within=2.0)
