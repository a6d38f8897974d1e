"""Under CI=true the dsh-testing pytest plugin turns a skip into a failure."""

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


@pytest.mark.parametrize(("ci", "expected"), [("true", "1 failed"), ("", "1 skipped")])
def test_skip_fails_under_ci(tmp_path: Path, ci: str, expected: str) -> None:
    (tmp_path / "test_skip.py").write_text(SKIPPING)
    env = {**os.environ, "CI": ci}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=50,
    )
    assert expected in done.stdout, done.stdout
    if ci:
        assert "skipped under CI=true" in done.stdout
        assert "the frobnicator is not installed" in done.stdout
