"""``dsh demo``: the main job, offline.

A lead agent on the scripted model first has an ordinary turn, then delegates
through the ``subagent`` (spawn) and ``subagent_fork`` tools in parallel. The demo
shows the run with the same view as ``dsh run``: on a terminal the lead's text
streams above a live delegation tree; otherwise plain lines and the finished tree
(all on stdout: the demo's output is the show); ``--json`` for JSON lines.
"""

from __future__ import annotations

import argparse
import sys

import anyio

from dsh.cli._interrupt import Interrupt
from dsh.cli._presets import shipped_preset
from dsh.cli._view import RunView
from dsh.cli._watch import choose_view, summarize, watch
from dsh.core import Context

__all__ = ["demo_command"]

FIRST_TASK = "Remember: the release is called Aurora and ships on Friday."
SECOND_TASK = "Prepare the Aurora release."


def demo_command(args: argparse.Namespace) -> int:
    """Run the demo; exit status 0 when every delegation completed, 130 on Ctrl-C."""
    view = choose_view(json_lines=getattr(args, "json", False), demo=True)
    try:
        return anyio.run(_demo, args.sessions_dir, view)
    finally:
        view.close()


async def _demo(sessions_dir: str | None, view: RunView) -> int:
    preset = shipped_preset("demo")
    interrupt = Interrupt()
    view.say("dsh demo: offline, scripted model, real delegation through ctx.subagents\n")
    async with Context.open(preset, sessions_dir=sessions_dir) as ctx:
        lead = ctx.agents.create(label="lead")
        unwatch = watch(ctx, lead, view)
        with anyio.CancelScope() as scope, interrupt.catching(scope):
            view.say(f"user → lead: {FIRST_TASK}")
            await lead.run(FIRST_TASK)
            view.say(f"\nuser → lead: {SECOND_TASK}")
            outcome = await lead.run(SECOND_TASK)
        if interrupt.signal is not None:
            view.interrupted()
            unwatch()
            view.close()
            print("dsh: interrupted", file=sys.stderr)
            return interrupt.exit_status
        view.finish(summarize(ctx, lead, outcome))
        unwatch()
        view.close()
        nodes = list(view.tree.walk())
        if sessions_dir:
            view.say(f"\nsessions written to {sessions_dir} (one JSONL file per agent)")
        ok = outcome.stop_reason == "completed" and all(n.stop_reason == "completed" for n in nodes)
        return 0 if ok and len(nodes) == 2 else 1
