"""``dsh mcp`` for dsh-cli's ``dsh.commands`` group, and ``python -m dsh.mcp`` without it.

Only argparse is needed to build its options: the MCP SDK and the server are loaded
once the command runs (``dsh --help`` imports this module).
"""

from __future__ import annotations

import argparse

__all__ = ["McpCommand", "command"]


class McpCommand:
    """``dsh mcp``: serve the preset's subagent tools over the Model Context Protocol."""

    help = "serve the preset's subagent tools over the Model Context Protocol (MCP)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The options of ``dsh mcp`` (see docs/serving-mcp.md)."""
        from dsh.core.argtypes import (
            add_http_arguments,
            add_log_level_argument,
            add_preset_argument,
            add_trust_argument,
            positive_int,
        )

        parser.description = (
            "Serve a preset over MCP (stdio; streamable HTTP with --http): each"
            " dsh-tool-subagent row becomes a tool that delegates to its provider, with"
            " progress notifications, cancellation and the child's usage."
        )
        add_preset_argument(parser, "preset file or named preset to serve")
        add_trust_argument(parser)
        parser.add_argument("--name", help="the server's name (default dsh-<preset name>)")
        parser.add_argument(
            "--sessions-dir", metavar="DIR", help="persist the children's sessions as JSONL here"
        )
        parser.add_argument(
            "--max-line-bytes",
            type=positive_int,
            default=16 * 1024 * 1024,
            metavar="N",
            help="longest frame read on stdio (default 16777216, 16 MiB); longer ones are dropped",
        )
        parser.add_argument(
            "--http",
            action="store_true",
            help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
        )
        add_http_arguments(parser, when="with --http: ")
        add_log_level_argument(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Serve until stdin closes (stdio) or a signal; returns the exit status."""
        from dsh.mcp._options import ServeOptions
        from dsh.mcp._serve import serve_command

        return serve_command(
            ServeOptions(
                preset=args.preset,
                trust=args.trust,
                name=args.name,
                sessions_dir=args.sessions_dir,
                max_line_bytes=args.max_line_bytes,
                log_level=args.log_level,
                http=args.http,
                host=args.host,
                port=args.port,
                token_envs=list(args.token_env),
                allow_hosts=list(args.allow_host),
                allow_origins=list(args.allow_origin),
            )
        )


command = McpCommand()
"""The ``dsh.commands`` entry point ``mcp``."""


def main(argv: list[str] | None = None) -> int:
    """``python -m dsh.mcp [options]`` (the same as ``dsh mcp [options]``)."""
    from dsh.core.argtypes import run_standalone

    return run_standalone(command, "dsh mcp", argv)
