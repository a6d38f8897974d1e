"""What ``dsh`` subcommands share: finding the preset and argument types."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from dsh.core import PresetError, find_preset
from dsh.core.argtypes import (
    add_capacity_arguments,
    add_log_level_argument,
    add_otel_argument,
    apply_otel_argument,
    non_negative_float,
    port_number,
    positive_float,
    positive_int,
)
from dsh.core.plugins import named_presets
from dsh.core.tracing import TRACING_SWITCH_ENV

pytestmark = pytest.mark.timeout(10)

PRESET = '[agent.model]\nadapter = "scripted"\n'


def test_a_file_wins_then_dsh_toml_in_cwd(tmp_path: Path) -> None:
    (tmp_path / "dsh.toml").write_text(PRESET)
    other = tmp_path / "other.toml"
    other.write_text(PRESET)
    assert find_preset(str(other)).source == str(other)  # type: ignore[union-attr]
    found = find_preset(cwd=tmp_path, trust=True)  # not trusted yet: test_trust.py
    assert found is not None
    assert found.source == str(tmp_path / "dsh.toml")


def test_without_a_file_the_standard_preset_else_none(tmp_path: Path) -> None:
    found = find_preset(cwd=tmp_path)
    if "standard" in named_presets():  # dsh-cli is installed (the workspace environment)
        assert found is not None
        assert found.source.endswith("standard.toml")
    else:  # dsh-core's own environment
        assert found is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("nonesuch", 'no preset named "nonesuch"'),
        ("missing.toml", "no preset file missing.toml"),
        ("sub/dir.toml", "no preset file sub/dir.toml"),
    ],
)
def test_a_bad_preset_says_what_was_looked_for(value: str, words: str) -> None:
    with pytest.raises(PresetError, match=words):
        find_preset(value)


def test_a_folder_is_not_a_preset(tmp_path: Path) -> None:
    (tmp_path / "x.toml").mkdir()
    with pytest.raises(PresetError, match="is not a file"):
        find_preset(str(tmp_path / "x.toml"))


@pytest.mark.parametrize(
    ("kind", "text", "words"),
    [
        (positive_int, "0", "must be at least 1, got 0"),
        (positive_int, "two", "not an integer: 'two'"),
        (positive_float, "0", "must be positive, got 0"),
        (positive_float, "nan", "must be positive"),
        (non_negative_float, "-1", "must not be negative"),
        (port_number, "65536", "not a port number: 65536"),
        (port_number, "http", "not a port number: 'http'"),
    ],
)
def test_argument_types_name_the_bad_value(kind: object, text: str, words: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        kind(text)  # type: ignore[operator]


def test_argument_types_accept_good_values() -> None:
    assert positive_int("3") == 3
    assert positive_float("0.5") == 0.5
    assert non_negative_float("0") == 0.0
    assert port_number("0") == 0


def test_the_options_servers_share() -> None:
    parser = argparse.ArgumentParser()
    add_capacity_arguments(parser, "session", "sessions")
    add_log_level_argument(parser)
    args = parser.parse_args([])
    assert (args.max_sessions, args.session_idle, args.log_level) == (256, 1800.0, "warning")
    args = parser.parse_args(["--max-sessions", "3", "--session-idle", "2.5"])
    assert (args.max_sessions, args.session_idle) == (3, 2.5)
    assert "close sessions idle this long" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--max-sessions", "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--log-level", "loud"])


def test_otel_sets_the_tracing_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRACING_SWITCH_ENV, "0")  # recorded: the switch is undone after
    monkeypatch.delenv(TRACING_SWITCH_ENV)
    parser = argparse.ArgumentParser()
    add_otel_argument(parser)
    apply_otel_argument(parser.parse_args([]))
    assert TRACING_SWITCH_ENV not in os.environ
    apply_otel_argument(parser.parse_args(["--otel"]))
    assert os.environ[TRACING_SWITCH_ENV] == "1"
