"""Argument parsing and dispatch. Subcommands import what they need lazily; commands
of other packages (``dsh.commands`` entry points: ``dsh acp`` from dsh-acp, ``dsh a2a``
from dsh-a2a) are imported only when named, or for ``dsh --help``, so they start
fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dsh.cli._commands import LoadedCommand, discover, load

__all__ = ["BUILTIN_COMMANDS", "build_parser", "main"]

BUILTIN_COMMANDS = {"run", "demo", "presets", "init", "trust"}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``dsh`` argument parser (with the ``dsh.commands`` subcommands that ``argv``
    needs: the one it names, or all of them when it names none)."""
    parser = argparse.ArgumentParser(
        prog="dsh",
        description="dsh: agents that delegate to subagents.",
        epilog="Exit status: 0 done, 1 the agent's turn did not complete, 2 usage or"
        " configuration error, 3 done with failures (a refused tool call, a delegation"
        " that failed or could not start), 130 interrupted (Ctrl-C). See docs/cli.md.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run", help="run an agent on one task: live delegation tree, answer, usage"
    )
    add_run_arguments(run)

    demo = sub.add_parser(
        "demo", help="offline demo: a scripted parent delegates to spawn and fork children"
    )
    demo.add_argument(
        "--sessions-dir", metavar="DIR", help="persist the demo's sessions as JSONL here"
    )
    demo.add_argument(
        "--json", action="store_true", help="write every event as one JSON object per line"
    )

    presets = sub.add_parser("presets", help="list the named presets, or show one")
    actions = presets.add_subparsers(dest="presets_action", metavar="ACTION")
    actions.add_parser("list", help="list the named presets (the default)")
    show = actions.add_parser("show", help="print a named preset's TOML")
    show.add_argument("name", help="the preset's name (see dsh presets)")
    actions.add_parser("providers", help="list the installed subagent providers and their plugins")

    init = sub.add_parser("init", help="write a commented dsh.toml to start from")
    init.add_argument(
        "path", nargs="?", default="dsh.toml", help="where to write it (default: ./dsh.toml)"
    )

    from dsh.cli._trust_command import add_trust_arguments

    add_trust_arguments(
        sub.add_parser(
            "trust", help="trust a project's dsh.toml after showing what it would run or reach"
        )
    )

    for loaded in _external_commands(argv):
        help_text = loaded.command.help if loaded.command else f"(unavailable: {loaded.problem})"
        command_parser = sub.add_parser(loaded.name, help=help_text)
        command_parser.set_defaults(_external=loaded)
        if loaded.command is not None:
            try:
                loaded.command.add_arguments(command_parser)
            except Exception as exc:
                command_parser.set_defaults(
                    _external=LoadedCommand(
                        loaded.name,
                        loaded.source,
                        None,
                        f"add_arguments failed: {type(exc).__name__}: {exc}",
                    )
                )
    return parser


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """The options of ``dsh run``."""
    from dsh.core.argtypes import add_preset_argument, add_trust_argument

    run.add_argument("task", help="what the agent should do")
    add_preset_argument(
        run,
        "preset file, or a named preset such as 'standard' (default: dsh.toml in the"
        " working directory, else the standard preset)",
    )
    run.add_argument(
        "--cwd",
        metavar="DIR",
        help="the agent's working directory (file and shell tools are confined to it);"
        " default: the current directory",
    )
    run.add_argument("--sessions-dir", metavar="DIR", help="persist sessions as JSONL here")
    add_trust_argument(run)
    run.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="allow every tool without asking (scripts, CI)",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="write every event as one JSON object per line on stdout (for scripts)",
    )
    run.add_argument(
        "--detach",
        action="store_true",
        help="when the turn ends, kill background jobs still running (and say which)"
        " instead of waiting for them",
    )
    budget = run.add_argument_group(
        "budget", "caps on what the whole run spends: the lead and every delegation below it"
    )
    budget.add_argument(
        "--budget-tokens", metavar="N", type=int, help="input + output tokens of every model call"
    )
    budget.add_argument(
        "--budget-usd",
        metavar="X",
        type=float,
        help="US dollars, from the cost the model reports (a model without prices fails)",
    )
    budget.add_argument("--budget-seconds", metavar="S", type=float, help="wall time")
    budget.add_argument(
        "--budget-children", metavar="N", type=int, help="delegations started, all depths"
    )
    budget.add_argument(
        "--budget-turns", metavar="N", type=int, help="model calls, the lead's and all below"
    )
    run.add_argument("-v", "--verbose", action="store_true", help="print the session's events")
    tape = run.add_mutually_exclusive_group()
    tape.add_argument(
        "--record",
        metavar="DIR",
        help="record every model call of the run (children in other processes included)"
        " into DIR/tape.jsonl, through a local proxy; no key or header is written",
    )
    tape.add_argument(
        "--replay",
        metavar="DIR",
        help="answer every model call from DIR/tape.jsonl, with no model server and no key;"
        " the first call that differs from the tape stops with the difference shown (exit 3)",
    )
    tape.add_argument(
        "--resume",
        metavar="DIR",
        help="after a crash: answer from DIR/tape.jsonl (model calls and tool calls) while"
        " the run asks what it recorded, then go on live and record into it; the step in"
        " flight at the crash runs again (at least once)",
    )
    run.add_argument(
        "--replay-tools",
        action="store_true",
        help="with --replay: answer tool calls from the tape too instead of running them",
    )


def _external_commands(argv: Sequence[str] | None) -> list[LoadedCommand]:
    points = discover(BUILTIN_COMMANDS)
    if not points:
        return []
    words = list(sys.argv[1:] if argv is None else argv)
    named = next((word for word in words if not word.startswith("-")), None)
    if named in BUILTIN_COMMANDS:
        return []
    if named is not None and named in points:
        return [load(points[named])]
    return [load(point) for point in points.values()]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dsh`` command; returns the exit status."""
    try:
        return _dispatch(argv)
    except KeyboardInterrupt:
        print("dsh: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (dsh run ... | head): nothing more to say, and nothing
        # left to flush at exit.
        from dsh.cli._view import discard_output

        discard_output(sys.stdout)
        sys.stderr.close()
        return 141


def _dispatch(argv: Sequence[str] | None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command == "run":
        from dsh.cli._run import run_command

        return run_command(args)
    if args.command == "demo":
        from dsh.cli._demo import demo_command

        return demo_command(args)
    if args.command == "presets":
        from dsh.cli._presets import presets_command

        return presets_command(args)
    if args.command == "trust":
        from dsh.cli._trust_command import trust_command

        return trust_command(args)
    if args.command == "init":
        from dsh.cli._init import init_command

        return init_command(args)
    external: LoadedCommand | None = getattr(args, "_external", None)
    if external is not None:
        if external.command is None:
            print(f"dsh {external.name}: unavailable: {external.problem}", file=sys.stderr)
            return 2
        return int(external.command.run(args))
    parser.print_help(sys.stderr)
    return 2
