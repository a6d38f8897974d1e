"""A command-line run of a Python module, its output captured: :func:`run_cli`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["run_cli"]


def run_cli(
    module: str,
    args: Sequence[str] = (),
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """``python -m module *args`` (this interpreter) in ``cwd`` with ``env`` (None:
    this process's), stdin closed (``/dev/null``), stdout and stderr captured as text;
    killed and :class:`subprocess.TimeoutExpired` after ``timeout`` seconds. The exit
    status is the caller's to check."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
