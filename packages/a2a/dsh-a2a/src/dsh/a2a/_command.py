"""The ``dsh a2a`` subcommand (a ``dsh.commands`` entry point) and ``python -m dsh.a2a``.

Importing this module is cheap (``dsh --help`` imports it): the server and the A2A
SDK are imported only when the command runs.
"""

from __future__ import annotations

import argparse

__all__ = ["A2ACommand", "command"]


class A2ACommand:
    """``dsh a2a``: serve the preset's agent over the Agent2Agent protocol."""

    help = "serve an agent over the Agent2Agent (A2A) protocol on HTTP"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The options of ``dsh a2a`` (see docs/serving-a2a.md)."""
        from dsh.core.argtypes import port_number, positive_float, positive_int

        parser.description = (
            "Serve a dsh agent over A2A (JSON-RPC over HTTP, streaming over SSE). Each A2A"
            " task is one turn of an agent; a contextId continues its conversation."
        )
        parser.add_argument(
            "--preset", metavar="FILE|NAME", help="preset file or named preset for the agent"
        )
        parser.add_argument(
            "--host",
            default="127.0.0.1",
            help="address to bind (default 127.0.0.1; any other needs --token-env)",
        )
        parser.add_argument(
            "--port", type=port_number, default=8000, help="port (default 8000; 0 picks a free one)"
        )
        parser.add_argument(
            "--public-url",
            metavar="URL",
            help="the URL clients reach this server at (the agent card's interface URL),"
            " e.g. the load balancer's; default http://HOST:PORT/",
        )
        parser.add_argument(
            "--token-env",
            metavar="NAME",
            help="environment variable holding the bearer token every request must carry"
            " (required to bind a non-loopback address)",
        )
        parser.add_argument(
            "--task-store",
            metavar="URL",
            default="memory",
            help="where tasks live: memory (default), sqlite:///PATH or"
            " postgresql://USER:PASSWORD@HOST/DB (shared by several instances)",
        )
        parser.add_argument("--name", help="the agent card's name (default dsh-<preset name>)")
        parser.add_argument(
            "--description", help="the agent card's description (default: from the persona)"
        )
        parser.add_argument(
            "--sessions-dir", metavar="DIR", help="persist the agents' sessions as JSONL here"
        )
        parser.add_argument(
            "--max-contexts",
            type=positive_int,
            default=256,
            metavar="N",
            help="conversations kept at once; beyond, the least recently used idle one is closed",
        )
        parser.add_argument(
            "--context-idle",
            type=positive_float,
            default=1800.0,
            metavar="SECONDS",
            help="close conversations idle this long (default 1800)",
        )
        parser.add_argument(
            "--grace",
            type=positive_float,
            default=5.0,
            metavar="SECONDS",
            help="on SIGTERM, how long open streams get to deliver their last update",
        )
        parser.add_argument(
            "--log-level",
            default="warning",
            choices=["critical", "error", "warning", "info", "debug"],
            help="log level on stderr (default warning)",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Serve until SIGTERM / SIGINT; returns the exit status."""
        from dsh.a2a._serve import ServeOptions, serve_command

        store = args.task_store if args.task_store != "memory" else None
        return serve_command(
            ServeOptions(
                preset=args.preset,
                host=args.host,
                port=args.port,
                public_url=args.public_url,
                token_env=args.token_env,
                task_store=store,
                name=args.name,
                description=args.description,
                sessions_dir=args.sessions_dir,
                max_contexts=args.max_contexts,
                context_idle=args.context_idle,
                grace=args.grace,
                log_level=args.log_level,
            )
        )


command = A2ACommand()
"""The ``dsh.commands`` entry point ``a2a``."""


def main(argv: list[str] | None = None) -> int:
    """``python -m dsh.a2a [options]`` (the same as ``dsh a2a [options]``)."""
    parser = argparse.ArgumentParser(prog="dsh a2a", description=command.help)
    command.add_arguments(parser)
    return command.run(parser.parse_args(argv))
