"""What ``dsh acp`` and ``python -m dsh.acp`` accept, and how they start serving.

``dsh --help`` loads this module for the options alone; the ``acp`` library, the agent
and its server are imported when the command actually runs.
"""

from __future__ import annotations

import argparse

__all__ = ["AcpCommand", "command", "main"]


class AcpCommand:
    """``dsh acp``: serve the preset's agent over the Agent Client Protocol on stdio."""

    help = "serve an agent over the Agent Client Protocol on stdio"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The options of ``dsh acp`` (see docs/acp.md)."""
        from dsh.core.argtypes import (
            add_capacity_arguments,
            add_otel_argument,
            add_preset_argument,
            add_trust_argument,
            positive_int,
        )

        add_preset_argument(parser, "preset file or named preset for the served agent")
        parser.add_argument(
            "--sessions-dir", metavar="DIR", help="persist sessions (enables session/load)"
        )
        parser.add_argument(
            "--record",
            metavar="DIR",
            help="record the served agents' model calls and tool calls (and those of the dsh"
            " processes they start) into DIR/tape.jsonl, through a local proxy",
        )
        parser.add_argument(
            "--workspace",
            choices=("own", "client"),
            default="own",
            help="whose files and terminals the agent's file and shell tools use: its own"
            " (default), or the ACP client's where it offers fs / terminal (an editor then"
            " reads, shows and applies the edits and runs the commands)",
        )
        add_trust_argument(parser)
        add_otel_argument(parser)
        parser.add_argument(
            "--max-line-bytes",
            type=positive_int,
            default=16 * 1024 * 1024,
            metavar="N",
            help="longest JSON-RPC line accepted (longer lines are answered -32600;"
            " default 16 MiB)",
        )
        add_capacity_arguments(parser, "session", "sessions")

    def run(self, args: argparse.Namespace) -> int:
        """Serve until the client closes stdin or a signal; returns the exit status."""
        from dsh.acp._server import serve_command

        return serve_command(args)


command = AcpCommand()
"""The ``dsh.commands`` entry point ``acp``."""


def main(argv: list[str] | None = None) -> int:
    """``python -m dsh.acp [options]`` (the same as ``dsh acp [options]``)."""
    from dsh.core.argtypes import run_standalone

    return run_standalone(command, "dsh acp", argv)
