"""Preset errors, as ``dsh run`` prints them: a row of a ``dsh.toml`` that extends the
standard preset is named by that file and its own number (not its place after the
standard rows), and a near miss of a plugin or preset name says ``did you mean``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dsh.core import PresetError, load_preset
from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(60)


def dsh(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    return run_cli(
        "dsh.cli",
        args,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if not k.startswith(drop)},
        timeout=50,
    )


def test_a_bad_row_under_the_standard_rows_is_named_by_its_file_and_own_number(
    tmp_path: Path,
) -> None:
    mine = tmp_path / "dsh.toml"
    mine.write_text(
        'extends = "standard"\n[agent.model]\nadapter = "scripted"\n'
        '[[plugin]]\nname = "dsh-tool-shel"\n'
    )
    standard_rows = len(load_preset(mine).plugin) - 1
    assert standard_rows >= 10
    done = dsh("run", "--trust", "hi", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(
        f'dsh run: {mine} row 1 (id "dsh-tool-shel", plugin "dsh-tool-shel"): unknown plugin'
        ' "dsh-tool-shel"; did you mean "dsh-tool-shell"? (installed: '
    )
    assert f"row {standard_rows + 1}" not in done.stderr


def test_extends_a_misspelt_named_preset_says_did_you_mean(tmp_path: Path) -> None:
    mine = tmp_path / "dsh.toml"
    mine.write_text('extends = "standart"\n')
    with pytest.raises(PresetError) as info:
        load_preset(mine)
    assert str(info.value).startswith(
        f'{mine}: extends: no preset named "standart"; did you mean "standard"? (installed: '
    )
    done = dsh("run", "--trust", "hi", cwd=tmp_path)
    assert done.returncode == 2
    assert 'no preset named "standart"; did you mean "standard"?' in done.stderr


def test_preset_option_with_a_misspelt_name_says_did_you_mean(tmp_path: Path) -> None:
    done = dsh("run", "--preset", "standart", "hi", cwd=tmp_path)
    assert done.returncode == 2
    assert (
        'no preset file "standart" and no preset named "standart"; did you mean "standard"?'
        in done.stderr
    )
    far = dsh("run", "--preset", "qqqq", "hi", cwd=tmp_path)
    assert far.returncode == 2
    assert "did you mean" not in far.stderr
