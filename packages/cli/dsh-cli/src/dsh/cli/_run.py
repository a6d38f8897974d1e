"""``dsh run``: run an agent from a preset on one task and print its output."""

from __future__ import annotations

import argparse
import sys

import anyio

from dsh.cli._presets import resolve_preset
from dsh.core import ConfigError, Context, PresetError, last_output

__all__ = ["run_command"]


def run_command(args: argparse.Namespace) -> int:
    """Exit status 0 when the turn completed, 1 when it ended otherwise, 2 on setup errors."""
    try:
        preset = resolve_preset(args.preset)
    except (PresetError, OSError) as exc:
        print(f"dsh run: {exc}", file=sys.stderr)
        return 2
    if preset.agent.model is None:
        print(
            "dsh run: no model is configured in "
            f"{preset.source}.\n\nAdd one to your preset (./dsh.toml or --preset FILE):\n\n"
            "  [agent.model]\n"
            '  adapter = "openai"          # OpenAI-compatible; the standard preset loads it\n'
            '  model = "deepseek-chat"\n'
            '  options = { base_url = "https://api.deepseek.com",'
            ' api_key_env = "DEEPSEEK_API_KEY" }\n\n'
            "or try the offline delegation demo, which needs no model:  dsh demo",
            file=sys.stderr,
        )
        return 2
    return anyio.run(_run, args, preset)


async def _run(args: argparse.Namespace, preset: object) -> int:
    from dsh.core import Preset

    assert isinstance(preset, Preset)
    try:
        async with Context.open(preset, cwd=args.cwd, sessions_dir=args.sessions_dir) as ctx:
            agent = ctx.agents.create()
            outcome = await agent.run(args.task)
            if args.verbose:
                for event in agent.session.events:
                    print(f"{event.seq:4} {event.type:20} {dict(event.data)}", file=sys.stderr)
            output = last_output(agent.session.events)
            if output:
                print(output)
            if outcome.stop_reason != "completed":
                detail = f": {outcome.error}" if outcome.error else ""
                print(f"dsh run: turn ended {outcome.stop_reason}{detail}", file=sys.stderr)
                return 1
            return 0
    except (PresetError, ConfigError) as exc:
        print(f"dsh run: {exc}", file=sys.stderr)
        return 2
