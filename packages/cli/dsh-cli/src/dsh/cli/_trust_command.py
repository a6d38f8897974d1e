"""``dsh trust [PATH]``: trust a project's ``dsh.toml`` (after showing what it would run
or reach), list the trusted ones, revoke one; and the question ``dsh run`` asks on a
terminal before it uses an untrusted ``dsh.toml`` (docs/security.md)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import TextIO

from dsh.core import PresetError
from dsh.core.plugins import (
    UntrustedPresetError,
    preset_reach,
    revoke_trust,
    trust_preset,
    trust_store_path,
    trusted_presets,
)

__all__ = ["add_trust_arguments", "ask_to_trust", "trust_command"]


def add_trust_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``dsh trust``."""
    parser.description = (
        "A dsh.toml found in the working directory is used only once you trust it."
        " `dsh trust` shows what the preset would run or reach (commands, hosts, variables"
        " passed on, permissions loosened) and records its content hash: an edit to the"
        f" file (or a file it extends) asks again. Recorded in {_store_hint()}."
    )
    parser.add_argument(
        "path",
        nargs="?",
        default="dsh.toml",
        help="the preset file, or a folder holding a dsh.toml (default: ./dsh.toml)",
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="list the trusted presets")
    what.add_argument("--revoke", action="store_true", help="forget the trust of PATH")


def trust_command(args: argparse.Namespace) -> int:
    """``dsh trust [PATH]``, ``dsh trust --list``, ``dsh trust --revoke [PATH]``."""
    if args.list:
        return _list()
    path = Path(args.path).expanduser()
    if path.is_dir():
        path = path / "dsh.toml"
    if args.revoke:
        if revoke_trust(path):
            print(f"dsh trust: {path.resolve()} is no longer trusted")
            return 0
        print(f"dsh trust: {path.resolve()} was not trusted", file=sys.stderr)
        return 1
    if not path.is_file():
        print(f"dsh trust: no preset file {path}", file=sys.stderr)
        return 2
    try:
        reach = preset_reach(path)
        recorded = trust_preset(path)
    except PresetError as exc:
        print(f"dsh trust: {exc}", file=sys.stderr)
        return 2
    print(f"dsh trust: trusted {recorded.path} (sha256 {recorded.digest[:12]}); it may:")
    for line in reach:
        print(f"  {line}")
    print(f"Undo with: dsh trust --revoke {shlex.quote(str(recorded.path))}")
    return 0


def _list() -> int:
    entries = trusted_presets()
    if not entries:
        print(f"dsh trust: nothing is trusted ({trust_store_path()})", file=sys.stderr)
        return 0
    for entry in entries:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.trusted_at))
        state = "trusted" if entry.current else "changed since (asks again)"
        if not entry.path.exists():
            state = "gone"
        print(f"{entry.path}\t{when}\t{state}")
    return 0


def ask_to_trust(
    exc: UntrustedPresetError, *, stdin: TextIO = sys.stdin, stderr: TextIO = sys.stderr
) -> bool:
    """Show what the untrusted preset would run or reach and ask; a yes records the
    trust of the content that was shown (one line read: ``y`` or ``yes``)."""
    state = "has changed since you trusted it" if exc.changed else "is not trusted yet"
    print(f"dsh: {exc.path} {state}. It would:", file=stderr)
    for line in exc.reach:
        print(f"  {line}", file=stderr)
    print("Trust it (recorded until the file changes) and go on? [y/N] ", end="", file=stderr)
    stderr.flush()
    answer = stdin.readline()
    if answer.strip().lower() not in ("y", "yes"):
        if not answer:
            print(file=stderr)
        return False
    trust_preset(exc.path, digest=exc.digest)
    print(
        f"dsh: trusted {exc.path} (undo: dsh trust --revoke {shlex.quote(str(exc.path))})",
        file=stderr,
    )
    return True


def _store_hint() -> str:
    return "$DSH_STATE_DIR, else $XDG_STATE_HOME/dsh, else ~/.local/state/dsh (trusted.json)"
