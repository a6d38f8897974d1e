"""``dsh worker`` (a ``dsh.commands`` entry point) and ``python -m dsh.subagent_temporal worker``.

The Temporal SDK and the worker itself are imported by :meth:`WorkerCommand.run`, not
here: ``dsh --help`` reads this module's options on every start.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

__all__ = ["WorkerCommand", "command", "main"]


class WorkerCommand:
    """``dsh worker``: run delegations from a Temporal task queue on this host."""

    help = "run a Temporal worker that executes delegations (provider temporal) on this host"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The options of ``dsh worker`` (see docs/providers/temporal.md)."""
        from dsh.core.argtypes import (
            add_log_level_argument,
            add_otel_argument,
            add_preset_argument,
            add_trust_argument,
            non_negative_float,
            positive_float,
            positive_int,
        )

        parser.description = (
            "Poll a Temporal task queue and run the delegations parents send with the"
            " `temporal` provider, through the providers of this worker's preset. The"
            " server and credentials come from --address/--namespace or the standard"
            " TEMPORAL_* environment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,"
            " TEMPORAL_API_KEY, TEMPORAL_TLS_*). SIGTERM drains."
        )
        add_preset_argument(
            parser,
            "the worker's preset: the providers, model and tools children get"
            " (default: ./dsh.toml, else the standard preset)",
        )
        add_trust_argument(parser)
        add_otel_argument(parser)
        parser.add_argument(
            "--task-queue",
            default=os.environ.get("DSH_TEMPORAL_TASK_QUEUE", "dsh-delegations"),
            help="the task queue to poll (default dsh-delegations; $DSH_TEMPORAL_TASK_QUEUE)",
        )
        parser.add_argument("--address", help="host:port of Temporal (default $TEMPORAL_ADDRESS)")
        parser.add_argument("--namespace", help="Temporal namespace (default $TEMPORAL_NAMESPACE)")
        parser.add_argument(
            "--identity", help="this worker's identity in Temporal (default dsh-worker@HOST:PID)"
        )
        parser.add_argument(
            "--max-concurrent",
            type=positive_int,
            metavar="N",
            help="children at once (default: this host's cores)",
        )
        parser.add_argument(
            "--grace",
            type=non_negative_float,
            default=30.0,
            metavar="SECONDS",
            help="on SIGTERM, how long running children get to finish before they are"
            " stopped and handed back (default 30)",
        )
        parser.add_argument(
            "--result-store",
            default=os.environ.get("DSH_TEMPORAL_RESULT_STORE"),
            metavar="URL",
            help="where large prompts and results travel: file:///shared/dir (the parents'"
            " result_store; default $DSH_TEMPORAL_RESULT_STORE)",
        )
        parser.add_argument(
            "--heartbeat-every",
            type=positive_float,
            default=1.0,
            metavar="SECONDS",
            help="seconds between heartbeats: how soon a cancel or progress is seen (default 1)",
        )
        parser.add_argument(
            "--tapes",
            metavar="DIR",
            help="keep each delegation's tape (model and tool calls) in DIR/<run>/, shared by"
            " the queue's workers: a child's attempt 2 replays attempt 1's completed steps"
            " instead of repeating them (the step in flight runs again)",
        )
        parser.add_argument(
            "--record",
            metavar="DIR",
            help="record every child's model calls and tool calls into one tape,"
            " DIR/tape.jsonl (for a look afterwards; --tapes is what resumes)",
        )
        parser.add_argument("--cwd", metavar="DIR", help="the children's working directory")
        parser.add_argument("--sessions-dir", metavar="DIR", help="persist children's sessions")
        add_log_level_argument(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Run until SIGTERM / SIGINT; returns the exit status (2: configuration)."""
        from dsh.core import PresetError, find_preset
        from dsh.core.argtypes import apply_otel_argument, log_to_stderr

        log_to_stderr("dsh worker", args.log_level)
        from dsh.subagent_temporal._worker import WorkerOptions, serve

        apply_otel_argument(args)  # the switch: contexts opened here trace
        try:
            preset = find_preset(args.preset, trust=args.trust)
        except (PresetError, OSError) as exc:
            print(f"dsh worker: {exc}", file=sys.stderr)
            return 2
        if args.cwd is not None and not Path(args.cwd).is_dir():
            print(f"dsh worker: --cwd {args.cwd}: not a directory", file=sys.stderr)
            return 2
        status = serve(
            WorkerOptions(
                preset=preset,
                task_queue=args.task_queue,
                address=args.address,
                namespace=args.namespace,
                identity=args.identity,
                max_concurrent=args.max_concurrent,
                grace=args.grace,
                result_store=args.result_store,
                heartbeat_every=args.heartbeat_every,
                cwd=args.cwd,
                sessions_dir=args.sessions_dir,
                tapes=args.tapes,
                record=args.record,
            )
        )
        _end_process(status)


def _end_process(status: int) -> NoReturn:
    """End the worker process now, with ``status``, once its output is flushed.

    The worker has stopped and closed everything it opened, but temporalio's Rust
    bridge keeps native threads that can call into Python while the interpreter
    finalizes, which aborts the process (``Fatal Python error: PyGILState_Release``,
    exit 134) after a clean stop: temporalio/sdk-python#300. Skipping the
    interpreter's teardown (logging and stdio flushed first) keeps the status the
    worker meant."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


command = WorkerCommand()
"""The ``dsh.commands`` entry point ``worker``."""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dsh.subagent_temporal worker [options]`` (the same as ``dsh worker``)."""
    parser = argparse.ArgumentParser(prog="python -m dsh.subagent_temporal")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    command.add_arguments(sub.add_parser("worker", help=command.help))
    args = parser.parse_args(argv)
    return command.run(args)
