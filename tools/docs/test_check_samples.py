"""The sample checker fails when a sample breaks (tools/docs.sh runs these tests).

Each test copies a real page into a temporary folder, breaks one thing in the copy,
runs the checker on the copy as tools/docs.sh does, and expects it to fail, naming
the copy's page and line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tools" / "docs" / "check_samples.py"


def check(*pages: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), "-v", *map(str, pages)],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )


def copy_with(tmp_path: Path, page: str, old: str, new: str) -> tuple[Path, int]:
    """A copy of ``page`` with ``old`` (which occurs once) replaced by ``new``, and the
    line number where the change starts."""
    text = (ROOT / page).read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{page} no longer holds {old!r}: update this test"
    copy = tmp_path / Path(page).name
    copy.write_text(text.replace(old, new), encoding="utf-8")
    return copy, text[: text.index(old)].count("\n") + 1


def test_the_real_page_passes(tmp_path: Path) -> None:
    page, _ = copy_with(tmp_path, "docs/delegating.md", "# From code", "# From code")
    done = check(page)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 failed" in done.stdout


def test_a_python_sample_that_stops_working_fails_the_check(tmp_path: Path) -> None:
    # The provider page's last sample asserts what the child answered; break the claim.
    page, line = copy_with(
        tmp_path,
        "docs/writing-a-provider.md",
        '"Checked: the logs")\n',
        '"Checked: the logs!")\n',
    )
    done = check(page)
    assert done.returncode == 1, done.stdout
    assert "AssertionError" in done.stdout
    failed = [row for row in done.stdout.splitlines() if row.startswith("FAILED")]
    assert len(failed) == 1, done.stdout
    assert f"{page}:" in failed[0]
    assert "[python] run" in failed[0]
    block_line = int(failed[0].split(f"{page}:")[1].split()[0])
    assert block_line < line  # the block that holds the broken line, named by its page line


def test_a_renamed_api_fails_the_check(tmp_path: Path) -> None:
    page, _ = copy_with(
        tmp_path,
        "README.md",
        "runtime = SubagentRuntime.of(ctx)",
        "runtime = SubagentRuntime.get(ctx)",
    )
    done = check(page)
    assert done.returncode == 1
    assert "AttributeError" in done.stdout
    assert "SubagentRuntime" in done.stdout


def test_a_preset_with_a_bad_row_fails_the_check(tmp_path: Path) -> None:
    page, _ = copy_with(
        tmp_path, "docs/delegating.md", 'tool_name = "subagent_fork"', 'tool_nam = "subagent_fork"'
    )
    done = check(page)
    assert done.returncode == 1
    assert "[toml] loaded" in done.stdout
    assert "tool_nam" in done.stdout


def test_a_shell_command_with_an_unknown_option_fails_the_check(tmp_path: Path) -> None:
    page, _ = copy_with(
        tmp_path,
        "docs/cli.md",
        'OPENAI_API_KEY=sk-... dsh run "Summarise',
        'OPENAI_API_KEY=sk-... dsh run --fast "Summarise',
    )
    done = check(page)
    assert done.returncode == 1
    assert "unrecognized arguments: --fast" in done.stdout


def test_blocks_are_run_or_marked(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n"
        "```python\n# not run: shows a shape only\nundefined_name()\n```\n\n"
        "<!-- not run: illustrative -->\n```yaml\nkey: value\n```\n\n"
        "```yaml\nkey: value\n```\n\n"
        "```python\n# not run:\nundefined_name()\n```\n",
        encoding="utf-8",
    )
    done = check(page)
    assert done.returncode == 1
    failed = [row for row in done.stdout.splitlines() if row.startswith("FAILED")]
    assert [row.split()[1] for row in failed] == [f"{page}:14", f"{page}:18"], done.stdout
    assert "no check for 'yaml' blocks" in done.stdout
    assert "'not run:' needs a reason" in done.stdout
