"""``dsh worker`` (a ``dsh.commands`` entry point) and ``python -m dsh.subagent_temporal worker``.

Importing this module is cheap (``dsh --help`` imports it): the SDK and the worker
are imported only when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh.core import Preset

__all__ = ["WorkerCommand", "command", "main"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def _positive(text: str) -> float:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


class WorkerCommand:
    """``dsh worker``: run delegations from a Temporal task queue on this host."""

    help = "run a Temporal worker that executes delegations (provider temporal) on this host"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The options of ``dsh worker`` (see docs/providers/temporal.md)."""
        parser.description = (
            "Poll a Temporal task queue and run the delegations parents send with the"
            " `temporal` provider, through the providers of this worker's preset. The"
            " server and credentials come from --address/--namespace or the standard"
            " TEMPORAL_* environment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,"
            " TEMPORAL_API_KEY, TEMPORAL_TLS_*). SIGTERM drains."
        )
        parser.add_argument(
            "--preset",
            metavar="FILE|NAME",
            help="the worker's preset: the providers, model and tools children get"
            " (default: ./dsh.toml, else the standard preset)",
        )
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
            type=_positive_int,
            metavar="N",
            help="children at once (default: this host's cores)",
        )
        parser.add_argument(
            "--grace",
            type=_non_negative,
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
            type=_positive,
            default=1.0,
            metavar="SECONDS",
            help="seconds between heartbeats: how soon a cancel or progress is seen (default 1)",
        )
        parser.add_argument("--cwd", metavar="DIR", help="the children's working directory")
        parser.add_argument("--sessions-dir", metavar="DIR", help="persist children's sessions")
        parser.add_argument(
            "--log-level",
            default="warning",
            choices=["critical", "error", "warning", "info", "debug"],
            help="log level on stderr (default warning)",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Run until SIGTERM / SIGINT; returns the exit status (2: configuration)."""
        logging.basicConfig(
            stream=sys.stderr,
            level=getattr(logging, args.log_level.upper(), logging.WARNING),
            format="dsh worker: %(levelname)s %(name)s: %(message)s",
        )
        from dsh.core import PresetError
        from dsh.subagent_temporal._worker import WorkerOptions, serve

        try:
            preset = _resolve_preset(args.preset)
        except (PresetError, OSError) as exc:
            print(f"dsh worker: {exc}", file=sys.stderr)
            return 2
        if args.cwd is not None and not Path(args.cwd).is_dir():
            print(f"dsh worker: --cwd {args.cwd}: not a directory", file=sys.stderr)
            return 2
        return serve(
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
            )
        )


def _resolve_preset(value: str | None) -> Preset | None:
    """``--preset`` as a file, else a named preset; without it ``./dsh.toml``, else the
    ``standard`` preset (dsh-cli's), else none."""
    from dsh.core import PresetError, load_named_preset, load_preset, named_presets

    if value is not None:
        file = Path(value).expanduser()
        if file.is_file():
            return load_preset(file)
        if value in named_presets():
            return load_named_preset(value)
        raise PresetError(f"no preset file {value} and no preset named {value!r}")
    local = Path.cwd() / "dsh.toml"
    if local.is_file():
        return load_preset(local)
    if "standard" in named_presets():
        return load_named_preset("standard")
    return None


command = WorkerCommand()
"""The ``dsh.commands`` entry point ``worker``."""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dsh.subagent_temporal worker [options]`` (the same as ``dsh worker``)."""
    parser = argparse.ArgumentParser(prog="python -m dsh.subagent_temporal")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    command.add_arguments(sub.add_parser("worker", help=command.help))
    args = parser.parse_args(argv)
    return command.run(args)
