"""Under CI=true the dsh-testing pytest plugin, where a project opted in, turns a skip
into a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

SKIPPING = """
import pytest

def test_needs_a_missing_tool():
    pytest.skip("the frobnicator is not installed")
"""


@pytest.mark.parametrize(
    ("opt_in", "ci", "expected"),
    [
        (True, "true", "1 failed"),
        (True, "", "1 skipped"),
        (False, "true", "1 skipped"),  # not opted in: the project's run is its own
    ],
)
def test_skip_fails_under_ci(tmp_path: Path, opt_in: bool, ci: str, expected: str) -> None:
    (tmp_path / "test_skip.py").write_text(SKIPPING)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env["CI"] = ci
    plugin = ["-p", "dsh.testing.pytest_plugin"] if opt_in else []
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=50,
    )
    assert expected in done.stdout, done.stdout + done.stderr
    if opt_in and ci:
        assert "skipped under CI=true" in done.stdout
        assert "the frobnicator is not installed" in done.stdout
    else:
        assert "skipped under CI=true" not in done.stdout
