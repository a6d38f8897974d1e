"""The delegation tree the views draw: in-process nesting by agent, nesting across a
process boundary by progress path, queued runs, usage; and a real three-level tree
(lead → ``dsh acp`` child → its spawn grandchild) through ``dsh run``."""

# ruff: noqa: E501  (the presets below are TOML, one row a line)

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

from dsh.cli._live_view import LiveView
from dsh.cli._tree import (
    DelegationTree,
    Node,
    describe_call,
    format_budget,
    format_usage,
    short_id,
)
from dsh.subagent import SubagentProgress, SubagentUsage
from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(90)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def start(
    run_id: str, parent: str, depth: int, provider: str = "spawn", label: str = "x"
) -> dict[str, object]:
    return {
        "run_id": run_id,
        "provider": provider,
        "label": label,
        "parent_agent": parent,
        "depth": depth,
    }


def test_in_process_nesting_follows_the_parent_agent() -> None:
    clock = Clock()
    tree = DelegationTree("lead", clock=clock)
    tree.start(start("c1", "lead", 1, label="child"))
    tree.start(start("g1", "c1", 2, label="grandchild"))  # the child's agent id is its run id
    tree.start(start("c2", "lead", 1, provider="fork"))
    assert [n.run_id for n in tree.roots] == ["c1", "c2"]
    assert [n.run_id for n in tree.roots[0].children] == ["g1"]
    clock.now = 101.5
    tree.progress(
        "g1",
        SubagentProgress("tool_call", name="shell", title="shell", arguments={"command": "ls -la"}),
    )
    assert tree.nodes["g1"].activity == "shell: ls -la"
    tree.progress("g1", SubagentProgress("usage", usage=SubagentUsage(10, 5)))
    tree.end(
        {
            **start("g1", "c1", 2),
            "stop_reason": "completed",
            "usage": SubagentUsage(12, 6, cost_usd=0.01),
        }
    )
    g1 = tree.nodes["g1"]
    assert (g1.state, g1.stop_reason, g1.elapsed(), g1.activity) == ("done", "completed", 1.5, None)
    assert format_usage(g1.usage) == "18 tokens (12 in / 6 out), $0.0100"
    assert tree.running() == 2


def test_runs_inside_another_process_nest_by_path() -> None:
    tree = DelegationTree("lead")
    tree.start(start("acp1", "lead", 1, provider="acp", label="remote"))
    tree.progress(
        "acp1", SubagentProgress("child_start", ("g",), run_id="g", provider="spawn", label="inner")
    )
    tree.progress("acp1", SubagentProgress("text", ("g",), text="hello "))
    tree.progress(
        "acp1",
        SubagentProgress("child_start", ("g", "h"), run_id="h", provider="spawn", label="deeper"),
    )
    tree.progress("acp1", SubagentProgress("queued", ("g", "h"), position=2))
    assert tree.nodes["h"].state == "queued"
    assert tree.nodes["h"].queue_position == 2
    tree.progress("acp1", SubagentProgress("text", ("g", "h"), text="working"))
    assert tree.nodes["h"].state == "running"
    tree.progress(
        "acp1", SubagentProgress("child_end", ("g", "h"), run_id="h", stop_reason="error")
    )
    tree.progress(
        "acp1", SubagentProgress("child_end", ("g",), run_id="g", stop_reason="completed")
    )
    acp = tree.roots[0]
    assert [c.run_id for c in acp.children] == ["g"]
    g = acp.children[0]
    assert (g.provider, g.label, g.depth, g.remote, g.state, g.text) == (
        "spawn",
        "inner",
        2,
        True,
        "done",
        "hello ",
    )
    h = g.children[0]
    assert (h.label, h.depth, h.stop_reason) == ("deeper", 3, "error")
    # An item about a nested run whose start was missed still finds a place.
    tree.progress("acp1", SubagentProgress("text", ("lost",), text="?"))
    assert tree.nodes["lost"] in acp.children
    # The live view draws all of it.
    view = LiveView(Console(file=io.StringIO(), width=160, color_system=None))
    view.tree = tree
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(view.render())
    text = out.getvalue()
    assert "[acp] remote" in text
    assert "[spawn] inner  completed" in text
    assert "[spawn] deeper  error" in text
    assert text.index("remote") < text.index("inner") < text.index("deeper")


def test_describe_call_and_usage_formats() -> None:
    assert (
        describe_call(SubagentProgress("tool_call", name="read_file", title="Read a.txt"))
        == "Read a.txt"
    )
    assert (
        describe_call(SubagentProgress("tool_call", name="glob", title="glob", arguments={"n": 1}))
        == "glob"
    )
    assert format_usage(SubagentUsage.unknown()) == ""
    assert format_usage(SubagentUsage(1, 0), short=True) == "1 token"


def test_short_id_keeps_a_remote_run_id_whole() -> None:
    # a session id of this process: its last 8 characters tell runs apart
    assert short_id("0193b2c4-9bf7-7e12-8a3d-5c6f9bf7fe93") == "9bf7fe93"
    # a remote run id (provider-pid-n): cut to 8 it lost its provider ("-21643-1")
    assert short_id("acp-21643-1") == "acp-21643-1"


CHILD = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
text = "Delegating."
tool_calls = [{ name = "subagent", arguments = { description = "inner", prompt = "inner work" } }]
[[agent.model.options.replies]]
text = "child done: {tool_results}"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent", max_depth = 3, agent_options = { model = { adapter = "scripted", options = { replies = [ { text = "grandchild says {prompt}", chunks = 3 } ] } } } }
"""


def parent(child: Path) -> str:
    args = ["-m", "dsh.cli", "acp", "--preset", str(child)]
    return f"""
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{{ name = "subagent_acp", arguments = {{ description = "remote", prompt = "delegate please" }} }}]
[[agent.model.options.replies]]
text = "lead got: {{tool_results}}"

[[plugin]]
name = "dsh-subagent-acp"
config = {{ command = {json.dumps(sys.executable)}, args = {json.dumps(args)} }}

[[plugin]]
name = "dsh-tool-subagent"
config = {{ provider = "acp", tool_name = "subagent_acp", max_depth = "provider-managed" }}
"""


def test_dsh_run_shows_a_grandchild_in_another_process(tmp_path: Path) -> None:
    child = tmp_path / "child.toml"
    child.write_text(CHILD)
    preset = tmp_path / "parent.toml"
    preset.write_text(parent(child))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DEEPSEEK_"))}
    done = run_cli(
        "dsh.cli",
        ["run", "--json", "--preset", str(preset), "go"],
        cwd=tmp_path,
        env=env,
        timeout=80,
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    starts = [e for e in events if e["type"] == "subagent/start"]
    assert [(e["provider"], e["label"]) for e in starts] == [("acp", "remote")]
    acp_run = starts[0]["run_id"]
    nested = [e["item"] for e in events if e["type"] == "subagent/progress" and e["item"]["path"]]
    assert all(e["run_id"] == acp_run for e in events if e["type"] == "subagent/progress")
    child_start = next(i for i in nested if i["kind"] == "child_start")
    grandchild = child_start["run_id"]
    assert child_start["path"] == [grandchild]
    assert (child_start["provider"], child_start["label"]) == ("spawn", "inner")
    text = "".join(i.get("text", "") for i in nested if i["kind"] == "text")
    assert text == "grandchild says inner work"
    child_end = next(i for i in nested if i["kind"] == "child_end")
    assert (child_end["path"], child_end["stop_reason"]) == ([grandchild], "completed")
    answer = next(e for e in events if e["type"] == "answer")
    assert answer["text"] == "lead got: child done: grandchild says inner work"
    # Plain lines (no terminal, no --json): the grandchild nested under the child.
    plain = run_cli(
        "dsh.cli", ["run", "--preset", str(preset), "go"], cwd=tmp_path, env=env, timeout=80
    )
    assert plain.returncode == 0, plain.stderr
    assert '  + [spawn] "inner" started' in plain.stderr
    assert "in another process" in plain.stderr
    assert '  - [spawn] "inner" completed' in plain.stderr


def test_a_budget_shows_a_time_remainder_to_a_tenth_of_a_second() -> None:
    # a child's time cap is what its parent had left at its start (29.5941 s here)
    node = Node("r1", "spawn", "loop", 1, started=0.0, ended=0.04, state="done")
    node.budget = {"tokens": 900, "seconds": 29.5941}
    node.spent = {"tokens": 900, "seconds": 0.04}
    assert format_budget(node) == "budget: 900 of 900 tokens, 0.0 of 29.6 s"
