"""``dsh demo``: the main job, offline.

A lead agent on the scripted model first has an ordinary turn, then delegates
through the ``subagent`` (spawn) and ``subagent_fork`` tools in parallel. The
demo prints the delegation tree (from the runtime's ``subagent/start`` and
``subagent/end`` events) and every result.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from dsh.cli._presets import shipped_preset
from dsh.core import BusEvent, Context, last_output

__all__ = ["demo_command"]

FIRST_TASK = "Remember: the release is called Aurora and ships on Friday."
SECOND_TASK = "Prepare the Aurora release."


@dataclass
class _Node:
    run_id: str
    provider: str
    label: str | None
    parent: str
    started: float
    stop_reason: str | None = None
    elapsed_ms: float | None = None
    children: list[_Node] = field(default_factory=list)


def demo_command(args: argparse.Namespace) -> int:
    """Run the demo; exit status 0 when every delegation completed."""
    return anyio.run(_demo, args.sessions_dir)


async def _demo(sessions_dir: str | None) -> int:
    preset = shipped_preset("demo")
    nodes: dict[str, _Node] = {}

    def on_start(event: BusEvent) -> None:
        data = event.data
        nodes[data["run_id"]] = _Node(
            data["run_id"],
            data["provider"],
            data["label"],
            data["parent_agent"],
            time.perf_counter(),
        )

    def on_end(event: BusEvent) -> None:
        node = nodes.get(event.data["run_id"])
        if node is not None:
            node.stop_reason = event.data["stop_reason"]
            node.elapsed_ms = (time.perf_counter() - node.started) * 1000

    print("dsh demo: offline, scripted model, real delegation through ctx.subagents\n")
    async with Context.open(preset, sessions_dir=sessions_dir) as ctx:
        ctx.events.on("subagent/start", on_start)
        ctx.events.on("subagent/end", on_end)
        lead = ctx.agents.create(label="lead")
        outputs: dict[str, str] = {}

        def keep_output(event: Any) -> None:
            if event.type == "tool/result":
                outputs[event.data["data"]["run_id"]] = event.data["content"][0]["text"]

        lead.observe(keep_output)
        print(f"user → lead: {FIRST_TASK}")
        await lead.run(FIRST_TASK)
        print(f"lead: {last_output(lead.session.events)}\n")
        print(f"user → lead: {SECOND_TASK}")
        outcome = await lead.run(SECOND_TASK)

        print("\ndelegation tree:")
        print(f"lead (session {lead.id[:8]}, depth 0)")
        roots = [n for n in nodes.values() if n.parent == lead.id]
        for index, node in enumerate(roots):
            last = index == len(roots) - 1
            branch, indent = ("└─ ", "   ") if last else ("├─ ", "│  ")
            timing = f"{node.elapsed_ms:.1f} ms" if node.elapsed_ms is not None else "?"
            print(
                f'{branch}[{node.provider}] "{node.label}" (session {node.run_id[:8]}, depth 1)'
                f" → {node.stop_reason} in {timing}"
            )
            for line in outputs.get(node.run_id, "").splitlines():
                print(f"{indent}   {line}")
        print(f"\nlead's answer ({outcome.stop_reason}):")
        print(last_output(lead.session.events))
        if sessions_dir:
            print(f"\nsessions written to {sessions_dir} (one JSONL file per agent)")
        ok = outcome.stop_reason == "completed" and all(
            n.stop_reason == "completed" for n in nodes.values()
        )
        return 0 if ok and len(nodes) == 2 else 1
