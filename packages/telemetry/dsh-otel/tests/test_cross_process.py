"""One trace across a process boundary: parent (this process, in-memory exporter) →
``dsh acp`` child (a real child process, SDK configured by ``otel_child.py``) → its
spawn grandchild. The trace context travels in ACP ``_meta`` on ``session/prompt``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.trace import SpanKind

from dsh.core import Context, parse_preset
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.fixtures import (
    SPAWN_SUBAGENT_TOOL,
    delegate_rule,
    delegating_parent,
    keyed_preset,
    plugin_rows,
)
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

WRAPPER = Path(__file__).with_name("otel_child.py")

CHILD = plugin_rows("dsh-otel") + keyed_preset(
    delegate_rule("inner work"),
    default=[{"text": "grandchild says {prompt}", "chunks": 3}],
    plugins=SPAWN_SUBAGENT_TOOL,
)


def parent_preset(child: Path, spans_file: Path) -> str:
    args = [str(WRAPPER), "acp", "--preset", str(child)]
    acp = {
        "command": sys.executable,
        "args": args,
        "depth_limit": True,
        "env": {"DSH_OTEL_SPANS_FILE": str(spans_file)},
    }
    return delegating_parent("delegate please", then="parent done: {tool_results}") + plugin_rows(
        "dsh-otel",
        ("dsh-subagent-acp", acp),
        ("dsh-tool-subagent", {"provider": "acp", "tool_name": "subagent", "max_depth": 3}),
    )


def child_spans(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [s for s in map(json.loads, lines) if s["scope"] == "dsh.otel"]


def only(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [s for s in spans if s["name"] == name]
    assert len(found) == 1, [s["name"] for s in spans]
    return found[0]


async def test_one_trace_across_parent_child_and_grandchild(tmp_path: Path, spans: Any) -> None:
    child = tmp_path / "child.toml"
    child.write_text(CHILD, encoding="utf-8")
    spans_file = tmp_path / "child-spans.jsonl"
    before = live_children()
    async with Context.open(parse_preset(parent_preset(child, spans_file)), cwd=tmp_path) as ctx:
        with anyio.fail_after(60):
            outcome = await ctx.agents.create().run("go")
    assert outcome.stop_reason == "completed", outcome.error
    assert_no_new_processes(before, within=2.0)

    # the parent process: its turn ⊃ its chats and the tool call ⊃ the acp delegation
    turn = spans.one("invoke_agent")
    tool = spans.one("execute_tool subagent")
    delegation = spans.one("invoke_agent child")
    assert spans.parent(tool) == spans.id(turn)
    assert spans.parent(delegation) == spans.id(tool)
    assert delegation.kind == SpanKind.CLIENT  # the child runs in another process
    attrs = dict(delegation.attributes or {})
    assert attrs["dsh.subagent.provider"] == "acp"
    assert attrs["dsh.subagent.stop_reason"] == "completed"
    # tree-wide usage the child reported: its own two model calls and the grandchild's
    assert attrs["gen_ai.usage.output_tokens"] == 11
    trace_id = f"{spans.trace(turn):032x}"
    delegation_id = f"{spans.id(delegation):016x}"

    # the child process: every span in the same trace
    remote = child_spans(spans_file)
    assert remote, "the dsh acp child wrote no span"
    assert {s["trace_id"] for s in remote} == {trace_id}
    # the served turn continues the parent's delegation span
    served = only(remote, "invoke_agent")
    assert served["parent_id"] == delegation_id
    served_chats = [
        s for s in remote if s["name"] == "chat" and s["parent_id"] == served["span_id"]
    ]
    assert len(served_chats) == 2
    child_tool = only(remote, "execute_tool subagent")
    assert child_tool["parent_id"] == served["span_id"]
    # the grandchild's delegation under the child's tool call, its chat under that
    inner = only(remote, "invoke_agent inner")
    assert inner["parent_id"] == child_tool["span_id"]
    assert inner["kind"] == "INTERNAL"
    assert inner["attributes"]["dsh.subagent.provider"] == "spawn"
    assert inner["attributes"]["dsh.subagent.depth"] == 2
    assert inner["attributes"]["dsh.subagent.stop_reason"] == "completed"
    grandchild_chats = [
        s for s in remote if s["name"] == "chat" and s["parent_id"] == inner["span_id"]
    ]
    assert len(grandchild_chats) == 1
    assert grandchild_chats[0]["attributes"]["gen_ai.usage.output_tokens"] == 4
    assert len(remote) == 6  # served turn, 2 chats, tool call, inner delegation, its chat
