"""Programs the project's installers put under ``.tools/``, as tests find them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

__all__ = ["node_entry"]


def node_entry(variable: str, default: Path, what: str, installer: str) -> str:
    """The absolute path of a Node.js program's entry point (run it with ``node``):
    ``$variable`` if set, else ``default``. When node or the file is missing the test
    is skipped, with a message that names the installer to run (and fails under
    ``CI=true``, where a missing prerequisite must not pass silently)."""
    configured = os.environ.get(variable)
    path = Path(configured) if configured else default
    problem = None
    if shutil.which("node") is None:
        problem = "node is not on PATH (install Node.js >= 20)"
    elif not path.is_file():
        problem = (
            f"{what} not found at {path}{f' (from {variable})' if configured else ''};"
            f" run {installer} or set {variable}"
        )
    if problem is None:
        return str(path.resolve())
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(problem)
    pytest.skip(problem)
