"""``argparse`` types and shared options for ``dsh`` subcommands (``dsh.commands`` entry
points), so every command rejects a bad number, and words a common option, the same way::

    from dsh.core.argtypes import positive_int

    parser.add_argument("--max-tasks", type=positive_int, default=8)
    add_trust_argument(parser)  # --trust, worded as every dsh command words it

The servers (``dsh a2a``, ``dsh mcp``, ``dsh acp``, ``dsh worker``) also share how they
name their preset (:func:`add_preset_argument`, :func:`served_preset`), where they
listen (:func:`add_http_arguments`), how they log (:func:`log_to_stderr`), how they
refuse a bad configuration (:class:`UsageError`) and how ``python -m`` runs them
(:func:`run_standalone`, for a :class:`Command`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from dsh.core._errors import DshError
from dsh.core._tracing import TRACING_SWITCH_ENV

if TYPE_CHECKING:
    from dsh.core._presets import Preset

__all__ = [
    "Command",
    "UsageError",
    "add_capacity_arguments",
    "add_http_arguments",
    "add_log_level_argument",
    "add_otel_argument",
    "add_preset_argument",
    "add_trust_argument",
    "apply_otel_argument",
    "log_to_stderr",
    "non_negative_float",
    "port_number",
    "positive_float",
    "positive_int",
    "run_standalone",
    "served_preset",
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
        import os

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


def add_preset_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """``--preset FILE|NAME``: the preset file or named preset a command runs (``help``
    says what it is for; without the option, :func:`~dsh.core.find_preset`'s rule)."""
    parser.add_argument("--preset", metavar="FILE|NAME", help=help)


def add_http_arguments(
    parser: argparse.ArgumentParser, *, when: str = "", token_note: str = ""
) -> None:
    """``--host``, ``--port``, ``--token-env``, ``--allow-host`` and ``--allow-origin``:
    where an HTTP server listens and whom it serves (the rules of dsh-http-guard), worded
    the same in every command. ``when`` starts each help (e.g. ``"with --http: "``);
    ``token_note`` ends ``--token-env``'s (what several tokens mean to this server)."""
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help=f"{when}address to bind (default 127.0.0.1; any other needs --token-env)",
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=8000,
        help=f"{when}port (default 8000; 0 picks a free one)",
    )
    parser.add_argument(
        "--token-env",
        metavar="NAME",
        action="append",
        default=[],
        help=f"{when}environment variable holding the bearer token every request must carry"
        f" (required to bind a non-loopback address); repeatable{token_note}",
    )
    parser.add_argument(
        "--allow-host",
        metavar="NAME",
        action="append",
        default=[],
        help=f"{when}also serve requests whose Host header names NAME (repeatable; '*':"
        " any); on loopback only localhost and loopback addresses are served otherwise",
    )
    parser.add_argument(
        "--allow-origin",
        metavar="ORIGIN",
        action="append",
        default=[],
        help=f"{when}also accept requests carrying Origin: ORIGIN, e.g. https://app.example"
        " (repeatable)",
    )


class UsageError(DshError):
    """A command's configuration problem (no preset, no model, a bad option): the
    command reports it in one line and exits with status 2."""


def served_preset(value: str | None, *, trust: bool = False) -> Preset:
    """The preset a server command serves: :func:`~dsh.core.find_preset` of ``value``
    (``trust``: ``--trust``, the working directory's ``dsh.toml`` used without the trust
    check), which must exist and have a model (``dsh run``'s rule,
    :func:`~dsh.core.models.require_model`); :class:`UsageError` saying what is wrong."""
    from dsh.core._env_model import NoModelError, require_model
    from dsh.core._presets import PresetError
    from dsh.core._trust import find_preset

    try:
        preset = find_preset(value, trust=trust)
        if preset is None:
            raise UsageError("no preset: pass --preset FILE (or put a dsh.toml here)")
        require_model(preset)
    except (PresetError, NoModelError, OSError) as exc:
        raise UsageError(str(exc)) from None
    return preset


def log_to_stderr(prog: str, level: str) -> None:
    """Send this process's log to stderr at ``level`` (a ``--log-level`` value), each
    line starting with ``prog`` (``dsh a2a: WARNING dsh.a2a: ...``)."""
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level.upper(), logging.WARNING),
        format=f"{prog}: %(levelname)s %(name)s: %(message)s",
    )


@runtime_checkable
class Command(Protocol):
    """What a ``dsh.commands`` entry point loads (``dsh NAME``, from dsh-cli)."""

    help: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the subcommand's arguments to its parser."""

    def run(self, args: argparse.Namespace) -> int:
        """Run; the return value is the exit status."""


def run_standalone(command: Command, prog: str, argv: Sequence[str] | None = None) -> int:
    """Run a ``dsh.commands`` command without dsh-cli (``python -m dsh.a2a``): its
    options parsed from ``argv`` (default ``sys.argv[1:]``) under the name ``prog``;
    returns the exit status."""
    parser = argparse.ArgumentParser(prog=prog, description=command.help)
    command.add_arguments(parser)
    return command.run(parser.parse_args(argv))
