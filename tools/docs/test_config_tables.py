"""The config-table check fails when a table drifts from its model (tools/docs.sh runs
these tests).

Each test runs tools/docs/config_tables.py as tools/docs.sh does, on the real pages or
on a copy with one thing changed: a table edited by hand, a model whose default changed,
a field no table lists, a field without a docstring.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "docs" / "config_tables.py"

MODEL = '''
from pydantic import BaseModel, Field


class Base(BaseModel):
    timeout: float | None = Field(900.0, gt=0)
    """Seconds a turn may take."""


class Row(Base):
    name: str = "row"
    """The row's name | its id."""
    size: int = Field(16 * 1024 * 1024, ge=1024)
    """Largest message, in bytes."""
'''


def run(*args: str | Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(TOOL), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
        env=env,
    )


def failures(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("FAILED")]


def test_the_pages_are_current() -> None:
    done = run("--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 problems" in done.stderr


def test_a_table_edited_by_hand_fails_the_check_and_write_repairs_it(tmp_path: Path) -> None:
    # The acp page once said turn_timeout "none" (the model: 900.0); say it again.
    text = (ROOT / "docs/providers/acp.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `turn_timeout` |"))
    assert "`900.0`" in row, "the acp page's turn_timeout row changed: update this test"
    page = tmp_path / "acp.md"
    page.write_text(text.replace(row, row.replace("`900.0`", "none")), encoding="utf-8")

    done = run("--check", page)
    assert done.returncode == 1, done.stdout
    [failed] = failures(done)
    marker = text[: text[: text.index(row)].rindex("<!-- config-table:")].count("\n") + 1
    assert f"{page}:{marker}:" in failed  # the line of the table's marker
    assert "dsh.subagent_acp:AcpProviderConfig differs from the model" in failed
    assert f"-{row.replace('`900.0`', 'none')}" in done.stdout  # the diff shows both rows
    assert f"+{row}" in done.stdout

    assert run("--write", page).returncode == 0
    assert page.read_text(encoding="utf-8") == text
    assert run("--check", page).returncode == 0


def write_model(tmp_path: Path, source: str) -> Path:
    package = tmp_path / "modules"
    package.mkdir(exist_ok=True)
    (package / "drift_model.py").write_text(source, encoding="utf-8")
    return package


def test_a_model_that_changes_fails_the_check(tmp_path: Path) -> None:
    modules = write_model(tmp_path, MODEL)
    page = tmp_path / "page.md"
    page.write_text(
        "# Rows\n\n<!-- config-table: drift_model:Row -->\n<!-- /config-table -->\n\nAfter.\n",
        encoding="utf-8",
    )
    assert run("--write", page, pythonpath=modules).returncode == 0
    written = page.read_text(encoding="utf-8")
    assert written.splitlines()[2:9] == [
        "<!-- config-table: drift_model:Row -->",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
        '| `name` | `str` | `"row"` | The row\'s name \\| its id. |',
        "| `size` | `int` ≥ 1 KiB | `16777216` (16 MiB) | Largest message, in bytes. |",
        "| `timeout` | `float | None` > 0 | `900.0` | Seconds a turn may take. |",
        "<!-- /config-table -->",
    ]
    assert written.endswith("\nAfter.\n")
    assert run("--check", page, pythonpath=modules).returncode == 0

    # the model's default changes; the page does not
    write_model(tmp_path, MODEL.replace("Field(900.0, gt=0)", "Field(600.0, gt=0)"))
    done = run("--check", page, pythonpath=modules)
    assert done.returncode == 1
    [failed] = failures(done)
    assert f"{page}:3: the table of drift_model:Row differs from the model" in failed
    assert "+| `timeout` | `float | None` > 0 | `600.0` |" in done.stdout


def test_every_field_is_in_a_table(tmp_path: Path) -> None:
    modules = write_model(tmp_path, MODEL)
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- config-table: drift_model:Row only=name -->\n<!-- /config-table -->\n\n"
        "<!-- config-table: drift_model:Row only=size -->\n<!-- /config-table -->\n",
        encoding="utf-8",
    )
    done = run("--write", page, pythonpath=modules)
    assert done.returncode == 1
    assert failures(done) == [
        f"FAILED {page}:1: no table on this page lists timeout of drift_model:Row"
        " (add it to an only= list, or exclude= it)"
    ]
    page.write_text(
        page.read_text(encoding="utf-8").replace("only=size", "only=size exclude=timeout"),
        encoding="utf-8",
    )
    assert run("--check", page, pythonpath=modules).returncode == 0


def test_a_field_without_a_docstring_or_a_bad_marker_fails(tmp_path: Path) -> None:
    modules = write_model(tmp_path, MODEL.replace('    """Largest message, in bytes."""\n', ""))
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- config-table: drift_model:Row -->\n<!-- /config-table -->\n\n"
        "<!-- config-table: drift_model:Nope -->\n<!-- /config-table -->\n\n"
        "<!-- config-table: drift_model:Row only=sizes -->\n<!-- /config-table -->\n\n"
        "```text\n<!-- config-table: inside:AFence -->\n```\n\n"
        "<!-- config-table: drift_model:Row exclude=name -->\n",
        encoding="utf-8",
    )
    done = run("--check", page, pythonpath=modules)
    assert done.returncode == 1
    failed = failures(done)
    assert len(failed) == 4, done.stdout
    assert f"{page}:1: drift_model:Row.size has no docstring" in failed[0]
    assert f"{page}:4: drift_model has no Nope" in failed[1]
    assert f"{page}:7: drift_model:Row has no field 'sizes'" in failed[2]
    assert f"{page}:14: config-table without <!-- /config-table -->" in failed[3]
