"""The ``dsh mcp`` subcommand (a ``dsh.commands`` entry point) and ``python -m dsh.mcp``.

Importing this module is cheap (``dsh --help`` imports it): the server and the MCP
SDK are imported only when the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["McpCommand", "command"]


class McpCommand:
    """``dsh mcp``: serve the preset's subagent tools over the Model Context Protocol."""

    help = "serve the preset's subagent tools over the Model Context Protocol (MCP)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The options of ``dsh mcp`` (see docs/serving-mcp.md)."""
        from dsh.core.argtypes import (
            add_log_level_argument,
            add_trust_argument,
            port_number,
            positive_int,
        )

        parser.description = (
            "Serve a preset over MCP (stdio; streamable HTTP with --http): each"
            " dsh-tool-subagent row becomes a tool that delegates to its provider, with"
            " progress notifications, cancellation and the child's usage."
        )
        parser.add_argument(
            "--preset", metavar="FILE|NAME", help="preset file or named preset to serve"
        )
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
        parser.add_argument(
            "--host",
            default="127.0.0.1",
            help="with --http: address to bind (default 127.0.0.1; any other needs --token-env)",
        )
        parser.add_argument(
            "--port",
            type=port_number,
            default=8000,
            help="with --http: port (default 8000; 0 picks a free one)",
        )
        parser.add_argument(
            "--token-env",
            metavar="NAME",
            action="append",
            default=[],
            help="with --http: environment variable holding the bearer token every request"
            " must carry (required to bind a non-loopback address; repeatable)",
        )
        parser.add_argument(
            "--allow-host",
            metavar="NAME",
            action="append",
            default=[],
            help="with --http: also serve requests whose Host header names NAME (repeatable)",
        )
        parser.add_argument(
            "--allow-origin",
            metavar="ORIGIN",
            action="append",
            default=[],
            help="with --http: also accept requests carrying Origin: ORIGIN (repeatable)",
        )
        add_log_level_argument(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Serve until stdin closes (stdio) or a signal; returns the exit status."""
        from dsh.mcp._options import ServeOptions
        from dsh.mcp._serve import serve_command

        preset = args.preset
        local = Path.cwd() / "dsh.toml"
        if preset is None and args.trust and local.is_file():
            preset = str(local)  # named explicitly: used without the trust check
        return serve_command(
            ServeOptions(
                preset=preset,
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
    parser = argparse.ArgumentParser(prog="dsh mcp", description=command.help)
    command.add_arguments(parser)
    return command.run(parser.parse_args(argv))
