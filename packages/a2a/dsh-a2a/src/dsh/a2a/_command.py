"""``dsh a2a``'s options and entry points (``dsh.commands`` and ``python -m dsh.a2a``);
the A2A SDK and the server load when the command runs, so ``dsh --help`` stays quick.
"""

from __future__ import annotations

import argparse

__all__ = ["A2ACommand", "command"]


class A2ACommand:
    """``dsh a2a``: serve the preset's agent over the Agent2Agent protocol."""

    help = "serve an agent over the Agent2Agent (A2A) protocol on HTTP"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The options of ``dsh a2a`` (see docs/serving-a2a.md)."""
        from dsh.core.argtypes import (
            add_capacity_arguments,
            add_http_arguments,
            add_log_level_argument,
            add_otel_argument,
            add_preset_argument,
            add_trust_argument,
            positive_float,
            positive_int,
        )

        parser.description = (
            "Serve a dsh agent over A2A (JSON-RPC over HTTP, streaming over SSE). Each A2A"
            " task is one turn of an agent; a contextId continues its conversation."
        )
        add_preset_argument(parser, "preset file or named preset for the agent")
        add_trust_argument(parser)
        add_otel_argument(parser)
        add_http_arguments(
            parser, token_note="; several named tokens each see only the tasks they created"
        )
        parser.add_argument(
            "--public-url",
            metavar="URL",
            help="the URL clients reach this server at (the agent card's interface URL),"
            " e.g. the load balancer's; default http://HOST:PORT/",
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
        return serve_command(
            ServeOptions(
                preset=args.preset,
                trust=args.trust,
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
    from dsh.core.argtypes import run_standalone

    return run_standalone(command, "dsh a2a", argv)
