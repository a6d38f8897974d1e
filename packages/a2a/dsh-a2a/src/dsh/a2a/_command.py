"""The ``dsh a2a`` subcommand (a ``dsh.commands`` entry point) and ``python -m dsh.a2a``.

Importing this module is cheap (``dsh --help`` imports it): the server and the A2A
SDK are imported only when the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["A2ACommand", "command"]


class A2ACommand:
    """``dsh a2a``: serve the preset's agent over the Agent2Agent protocol."""

    help = "serve an agent over the Agent2Agent (A2A) protocol on HTTP"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The options of ``dsh a2a`` (see docs/serving-a2a.md)."""
        from dsh.core.argtypes import (
            add_capacity_arguments,
            add_log_level_argument,
            add_otel_argument,
            add_trust_argument,
            port_number,
            positive_float,
            positive_int,
        )

        parser.description = (
            "Serve a dsh agent over A2A (JSON-RPC over HTTP, streaming over SSE). Each A2A"
            " task is one turn of an agent; a contextId continues its conversation."
        )
        parser.add_argument(
            "--preset", metavar="FILE|NAME", help="preset file or named preset for the agent"
        )
        add_trust_argument(parser)
        add_otel_argument(parser)
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
            action="append",
            default=[],
            help="environment variable holding the bearer token every request must carry"
            " (required to bind a non-loopback address); repeat for several named tokens,"
            " each of which sees only the tasks it created",
        )
        parser.add_argument(
            "--allow-host",
            metavar="NAME",
            action="append",
            default=[],
            help="also serve requests whose Host header names NAME (repeatable; '*': any);"
            " on loopback only localhost and loopback addresses are served otherwise",
        )
        parser.add_argument(
            "--allow-origin",
            metavar="ORIGIN",
            action="append",
            default=[],
            help="also accept requests carrying Origin: ORIGIN, e.g. https://app.example"
            " (repeatable)",
        )
        parser.add_argument(
            "--max-body-bytes",
            type=positive_int,
            default=4 * 1024 * 1024,
            metavar="N",
            help="largest request body accepted (default 4194304, 4 MiB); 413 beyond",
        )
        parser.add_argument(
            "--header-timeout",
            type=positive_float,
            default=10.0,
            metavar="SECONDS",
            help="close a connection whose request headers are not complete this long after"
            " it opened or the request began (default 10)",
        )
        parser.add_argument(
            "--idle-timeout",
            type=positive_float,
            default=15.0,
            metavar="SECONDS",
            help="close a connection idle this long between requests; 408 for a request"
            " body that stops arriving this long (default 15)",
        )
        parser.add_argument(
            "--task-ttl",
            type=positive_float,
            default=3600.0,
            metavar="SECONDS",
            help="forget finished tasks this long after they finished (memory store; default 3600)",
        )
        parser.add_argument(
            "--max-tasks",
            type=positive_int,
            default=1000,
            metavar="N",
            help="tasks kept at once; beyond, the oldest finished ones are forgotten"
            " (memory store; default 1000)",
        )
        parser.add_argument(
            "--orphan-grace",
            type=positive_float,
            default=30.0,
            metavar="SECONDS",
            help="cancel a running task this long after the last client following it (its"
            " stream, a blocking send, a subscription) went away (default 30); a task sent"
            " with returnImmediately (0.3: blocking = false) runs in the background, never"
            " cancelled so",
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
            "--record",
            metavar="DIR",
            help="record the agents' model calls and tool calls (and those of the dsh"
            " processes they start) into DIR/tape.jsonl, through a local proxy",
        )
        add_capacity_arguments(parser, "context", "conversations")
        parser.add_argument(
            "--grace",
            type=positive_float,
            default=5.0,
            metavar="SECONDS",
            help="on SIGTERM, how long open streams get to deliver their last update",
        )
        add_log_level_argument(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Serve until SIGTERM / SIGINT; returns the exit status."""
        from dsh.a2a._serve import ServeOptions, serve_command
        from dsh.core.argtypes import apply_otel_argument

        apply_otel_argument(args)  # the switch: contexts opened here trace
        store = args.task_store if args.task_store != "memory" else None
        preset = args.preset
        local = Path.cwd() / "dsh.toml"
        if preset is None and args.trust and local.is_file():
            preset = str(local)  # named explicitly: used without the trust check
        return serve_command(
            ServeOptions(
                preset=preset,
                host=args.host,
                port=args.port,
                public_url=args.public_url,
                token_envs=list(args.token_env),
                task_store=store,
                name=args.name,
                description=args.description,
                sessions_dir=args.sessions_dir,
                record=args.record,
                max_contexts=args.max_contexts,
                context_idle=args.context_idle,
                grace=args.grace,
                log_level=args.log_level,
                allow_hosts=list(args.allow_host),
                allow_origins=list(args.allow_origin),
                max_body_bytes=args.max_body_bytes,
                header_timeout=args.header_timeout,
                idle_timeout=args.idle_timeout,
                task_ttl=args.task_ttl,
                max_tasks=args.max_tasks,
                orphan_grace=args.orphan_grace,
            )
        )


command = A2ACommand()
"""The ``dsh.commands`` entry point ``a2a``."""


def main(argv: list[str] | None = None) -> int:
    """``python -m dsh.a2a [options]`` (the same as ``dsh a2a [options]``)."""
    parser = argparse.ArgumentParser(prog="dsh a2a", description=command.help)
    command.add_arguments(parser)
    return command.run(parser.parse_args(argv))
