"""One view of a tree across a process boundary: parent → ``dsh acp`` child → its spawn
grandchild. The parent's ``progress()`` on the child's run shows the grandchild's own
items with a one-element path, and the child's usage includes the grandchild's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentStartRequest
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.fixtures import assert_one_grandchild, progress_and_result
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

CHILD = """
[[plugin]]
name = "dsh-testing-keyed-model"

[agent.model]
adapter = "keyed"

[[agent.model.options.rules]]
contains = "delegate"
[[agent.model.options.rules.replies]]
text = "Delegating."
tool_calls = [{ name = "subagent", arguments = { description = "inner", prompt = "inner work" } }]
[[agent.model.options.rules.replies]]
text = "child done: {tool_results}"

[[agent.model.options.default]]
text = "grandchild says {prompt}"
chunks = 3

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent", max_depth = 3 }
"""


def parent_preset(child: Path) -> str:
    args = ["-m", "dsh.cli", "acp", "--preset", str(child)]
    return f"""
[agent.model]
adapter = "scripted"

[[plugin]]
name = "dsh-subagent-acp"
[plugin.config]
command = {json.dumps(sys.executable)}
args = {json.dumps(args)}
depth_limit = true
"""


async def test_the_parent_sees_the_grandchild_with_its_path(tmp_path: Path) -> None:
    child = tmp_path / "child.toml"
    child.write_text(CHILD)
    before = live_children()
    async with Context.open(parse_preset(parent_preset(child)), cwd=tmp_path) as ctx:
        parent = ctx.agents.create()
        request = SubagentStartRequest("delegate please", parent, AbortSignal(), max_depth=3)
        run = await ctx.subagents.start("acp", request)
        items, result = await progress_and_result(run)
    assert result.stop_reason == "completed", result
    assert result.output == "child done: grandchild says inner work"

    own = [i for i in items if i.path == ()]
    assert any(i.kind == "text" for i in own)
    assert_one_grandchild(items, provider="spawn", label="inner", text="grandchild says inner work")

    # tree-wide usage: the child's own two model calls (1 + 6 words) and the grandchild's (4)
    assert result.usage.output_tokens == 11
    assert not result.usage.incomplete
    assert_no_new_processes(before, within=2.0)
