"""Subcommands from other packages (the ``dsh.commands`` entry-point group), through a
real installed distribution's metadata: a good command runs; a broken one, one that
is not a command and one named like a built-in never break ``dsh --help`` or ``dsh run``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(60)

MODULE = """
import argparse


class Hello:
    help = "say hello (a plugin command)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--name", default="world")

    def run(self, args: argparse.Namespace) -> int:
        print(f"hello, {args.name}")
        return 7


hello = Hello()
not_a_command = object()


class BadArgs(Hello):
    help = "breaks while adding its arguments"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        raise RuntimeError("no arguments today")


bad_args = BadArgs()
"""

ENTRY_POINTS = """
[dsh.commands]
hello = fake_dsh_commands:hello
broken = fake_dsh_commands_missing:thing
notcmd = fake_dsh_commands:not_a_command
badargs = fake_dsh_commands:bad_args
run = fake_dsh_commands:hello
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder on PYTHONPATH holding a module and a distribution that declares the
    entry points."""
    (tmp_path / "fake_dsh_commands.py").write_text(MODULE)
    dist = tmp_path / "fake_dsh_commands-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-dsh-commands\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    return tmp_path


def dsh(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return run_cli("dsh.cli", args, env=env, timeout=50)


def test_a_plugin_command_runs(site: Path) -> None:
    done = dsh(site, "hello", "--name", "dsh")
    assert done.stdout == "hello, dsh\n"
    assert done.returncode == 7


def test_help_lists_good_and_broken_commands_without_failing(site: Path) -> None:
    done = dsh(site, "--help")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())  # argparse wraps long help lines
    assert "say hello (a plugin command)" in out
    assert "broken" in out
    assert "unavailable: failed to import" in out
    assert "notcmd" in out
    assert "is not a dsh command" in out
    assert "Traceback" not in out + done.stderr


def test_broken_commands_say_why_and_builtins_win(site: Path) -> None:
    broken = dsh(site, "broken")
    assert broken.returncode == 2
    assert "dsh broken: unavailable: failed to import" in broken.stderr
    assert "Traceback" not in broken.stderr
    badargs = dsh(site, "badargs")
    assert badargs.returncode == 2
    assert "add_arguments failed: RuntimeError: no arguments today" in badargs.stderr
    # "run" stays the built-in command.
    run = dsh(site, "run", "--help")
    assert run.returncode == 0
    assert "--detach" in run.stdout
    assert "hello, world" not in run.stdout


def test_builtin_commands_do_not_import_plugin_commands(site: Path) -> None:
    done = dsh(site, "presets")
    assert done.returncode == 0
    assert "standard" in done.stdout
    assert done.stderr == ""
