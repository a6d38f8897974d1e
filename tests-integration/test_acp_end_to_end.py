"""End to end through the real plugin loader: a parent on a scripted model calls the
``subagent_acp`` tool, the acp provider runs a real ``dsh acp`` child process on
its own scripted model, and the child's answer lands in the parent's log as the
tool result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dsh.core import Context, last_output, parse_preset, text_of
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.fixtures import ONE_TOOL_CALL_TURN
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

CHILD = """
[agent]
persona = "You are the child."
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
text = "Child answer: 6 x 7 = 42 (asked: {prompt})"
chunks = 5
"""

FAILING_CHILD = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
error = "the child's model is down"
"""


def parent_preset(child: Path) -> str:
    args = ["-m", "dsh.cli", "acp", "--preset", str(child)]
    return f"""
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
[[agent.model.options.replies.tool_calls]]
name = "subagent_acp"
arguments = {{ description = "multiply", prompt = "What is 6 x 7?" }}
[[agent.model.options.replies]]
text = "The child said: {{tool_results}}"

[[plugin]]
name = "dsh-subagent-acp"
[plugin.config]
command = {json.dumps(sys.executable)}
args = {json.dumps(args)}
eof_grace = 2.0
term_grace = 2.0

[[plugin]]
name = "dsh-tool-subagent"
config = {{ provider = "acp", tool_name = "subagent_acp", max_depth = "provider-managed" }}
"""


async def _delegate(tmp_path: Path, child_preset: str) -> tuple[list[dict[str, object]], str]:
    child = tmp_path / "child.toml"
    child.write_text(child_preset, encoding="utf-8")
    before = live_children()
    async with Context.open(parse_preset(parent_preset(child)), cwd=tmp_path) as ctx:
        parent = ctx.agents.create()
        outcome = await parent.run("Delegate the multiplication.")
        assert outcome.stop_reason == "completed", outcome.error
        events = [{"type": e.type, **e.data} for e in parent.session.events]
        final = last_output(parent.session.events)
    assert_no_new_processes(before)
    return events, final


async def test_child_answer_lands_in_the_parent_log(tmp_path: Path) -> None:
    events, final = await _delegate(tmp_path, CHILD)
    calls = [e for e in events if e["type"] == "tool/call"]
    results = [e for e in events if e["type"] == "tool/result"]
    assert [c["name"] for c in calls] == ["subagent_acp"]
    (result,) = results
    assert result["is_error"] is False
    answer = "Child answer: 6 x 7 = 42 (asked: What is 6 x 7?)"
    assert text_of(result["content"]) == answer  # type: ignore[arg-type]
    assert result["data"]["stop_reason"] == "completed"  # type: ignore[index]
    assert final == f"The child said: {answer}"
    # the parent's log records only the call and its result, nothing of the child's turn
    assert [e["type"] for e in events] == list(ONE_TOOL_CALL_TURN)


async def test_a_failing_child_becomes_an_error_tool_result(tmp_path: Path) -> None:
    events, final = await _delegate(tmp_path, FAILING_CHILD)
    (result,) = [e for e in events if e["type"] == "tool/result"]
    assert result["is_error"] is True
    text = text_of(result["content"])  # type: ignore[arg-type]
    assert text.startswith("subagent run failed\nDiagnostic: acp session/prompt failed:")
    assert "dsh turn error: model call failed: the child's model is down" in text
    assert final.startswith("The child said: subagent run failed")
