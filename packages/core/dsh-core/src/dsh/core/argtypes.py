"""``argparse`` types and shared options for ``dsh`` subcommands (``dsh.commands`` entry
points), so every command rejects a bad number, and words a common option, the same way::

    from dsh.core.argtypes import positive_int

    parser.add_argument("--max-tasks", type=positive_int, default=8)
    add_trust_argument(parser)  # --trust, worded as every dsh command words it
"""

from __future__ import annotations

import argparse
import os

from dsh.core._tracing import TRACING_SWITCH_ENV

__all__ = [
    "add_capacity_arguments",
    "add_log_level_argument",
    "add_otel_argument",
    "add_trust_argument",
    "apply_otel_argument",
    "non_negative_float",
    "port_number",
    "positive_float",
    "positive_int",
]


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """A number of 0 or more (seconds, say); ``nan`` is refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def positive_float(text: str) -> float:
    """A number greater than 0; ``nan`` is refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def port_number(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the system picks a free one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {value}")
    return value


def add_trust_argument(parser: argparse.ArgumentParser) -> None:
    """``--trust``: use the working directory's ``dsh.toml`` for this run without it
    being trusted (workspace trust; the same words in every command)."""
    parser.add_argument(
        "--trust",
        action="store_true",
        help="use the working directory's dsh.toml for this run without it being trusted"
        " (see dsh trust)",
    )


def add_otel_argument(parser: argparse.ArgumentParser) -> None:
    """``--otel``: trace with OpenTelemetry, configured from the ``OTEL_*`` variables
    (the same as ``DSH_OTEL=1``)."""
    parser.add_argument(
        "--otel",
        action="store_true",
        help="trace with OpenTelemetry, the SDK configured from the standard OTEL_*"
        " variables (the same as DSH_OTEL=1; needs dsh-otel[sdk]; see docs/tracing.md)",
    )


def apply_otel_argument(args: argparse.Namespace) -> None:
    """After :func:`add_otel_argument`: with ``--otel``, set the tracing switch
    (``DSH_OTEL=1``) in this process's environment, so the contexts it opens trace and
    the processes it starts inherit it (docs/tracing.md)."""
    if args.otel:
        os.environ[TRACING_SWITCH_ENV] = "1"


def add_log_level_argument(parser: argparse.ArgumentParser) -> None:
    """``--log-level``: the level of the log a server writes on stderr (default warning)."""
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="log level on stderr (default warning)",
    )


def add_capacity_arguments(parser: argparse.ArgumentParser, unit: str, noun: str) -> None:
    """``--max-<unit>s`` (default 256) and ``--<unit>-idle`` (seconds, default 1800): how
    many conversations (``noun``, e.g. ``sessions``) a server keeps at once, closing the
    least recently used idle one beyond that, and how long an idle one lives."""
    parser.add_argument(
        f"--max-{unit}s",
        type=positive_int,
        default=256,
        metavar="N",
        help=f"{noun} kept at once; beyond, the least recently used idle one is closed",
    )
    parser.add_argument(
        f"--{unit}-idle",
        type=positive_float,
        default=1800.0,
        metavar="SECONDS",
        help=f"close {noun} idle this long (default 1800)",
    )
