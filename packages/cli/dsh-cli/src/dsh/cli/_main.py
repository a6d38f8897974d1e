"""Argument parsing and dispatch. Subcommands import what they need lazily, so
``dsh acp`` starts fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``dsh`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="dsh", description="dsh: agents that delegate to subagents."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run an agent from a preset on one task and print its output")
    run.add_argument("task", help="what the agent should do")
    run.add_argument(
        "--preset",
        metavar="FILE",
        help="preset TOML (default: ./dsh.toml, else the standard preset)",
    )
    run.add_argument("--cwd", metavar="DIR", help="working directory recorded for the agent")
    run.add_argument("--sessions-dir", metavar="DIR", help="persist sessions as JSONL here")
    run.add_argument("-v", "--verbose", action="store_true", help="print the session's events")

    demo = sub.add_parser(
        "demo", help="offline demo: a scripted parent delegates to spawn and fork children"
    )
    demo.add_argument(
        "--sessions-dir", metavar="DIR", help="persist the demo's sessions as JSONL here"
    )

    acp = sub.add_parser("acp", help="serve an agent over the Agent Client Protocol on stdio")
    acp.add_argument("--preset", metavar="FILE", help="preset TOML for the served agent")
    acp.add_argument(
        "--sessions-dir", metavar="DIR", help="persist sessions (enables session/load)"
    )
    acp.add_argument(
        "--max-line-bytes",
        type=_positive_int,
        default=16 * 1024 * 1024,
        metavar="N",
        help="longest JSON-RPC line accepted (longer lines are answered -32600; default 16 MiB)",
    )
    acp.add_argument(
        "--max-sessions",
        type=_positive_int,
        default=256,
        metavar="N",
        help="sessions kept at once; beyond, the least recently used idle one is closed",
    )
    acp.add_argument(
        "--session-idle",
        type=_positive_float,
        default=1800.0,
        metavar="SECONDS",
        help="close sessions idle this long (default 1800)",
    )

    sub.add_parser("presets", help="list the presets shipped with dsh")
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dsh`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        from dsh.cli._run import run_command

        return run_command(args)
    if args.command == "demo":
        from dsh.cli._demo import demo_command

        return demo_command(args)
    if args.command == "acp":
        from dsh.cli._acp_server import acp_command

        return acp_command(args)
    if args.command == "presets":
        from dsh.cli._presets import list_presets_command

        return list_presets_command()
    parser.print_help(sys.stderr)
    return 2
