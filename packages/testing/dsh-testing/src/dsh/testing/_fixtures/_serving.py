"""A server process of a test's own (``dsh a2a``, an SDK agent...) that announces its
URL on stderr."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ServingProcess", "start_serving"]


@dataclass
class ServingProcess:
    """A running server process: its URL and the file its stdout and stderr go to."""

    process: subprocess.Popen[bytes]
    url: str
    stderr_path: Path
    returncode: int | None = field(default=None)

    @property
    def stderr(self) -> str:
        """What the process wrote so far (stdout and stderr)."""
        return self.stderr_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, bound: float = 20.0) -> int:
        """Signal the process and wait for it (SIGKILL past ``bound``); its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(bound)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.returncode = self.process.returncode
        return self.returncode


def start_serving(
    argv: Sequence[str],
    ready: re.Pattern[str],
    stderr_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    bound: float = 90.0,
) -> ServingProcess:
    """Start ``argv`` in a session of its own (``env`` added to this process's
    environment; ``cwd`` default: ``stderr_path``'s folder), its output to
    ``stderr_path``; wait up to ``bound`` seconds until the output matches ``ready``
    (group 1: the URL). Fails with the output if the process exits or stays silent."""
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
            env={**os.environ, **(env or {})},
            cwd=stderr_path.parent if cwd is None else cwd,
            start_new_session=True,
        )
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        match = ready.search(stderr_path.read_text(errors="replace"))
        if match:
            return ServingProcess(process, match.group(1), stderr_path)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    served = ServingProcess(process, "", stderr_path)
    served.stop(signal.SIGKILL)
    raise AssertionError(f"{list(argv)} did not start within {bound} s:\n{served.stderr}")
