"""``dsh a2a`` in a folder with an untrusted ``dsh.toml``: refused before anything of it
loads (exit 2, how to trust it); ``--trust`` serves it for this run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

PRESET = '[agent.model]\nadapter = "scripted"\n[[plugin]]\nname = "dsh-testing-example"\n'


def test_an_untrusted_dsh_toml_is_refused_and_trust_serves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "dsh.toml").write_text(PRESET)
    argv = [sys.executable, "-m", "dsh.a2a", "--port", "0"]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 2, done.stderr
    assert f"{(tmp_path / 'dsh.toml').resolve()} is not trusted" in done.stderr
    assert 'plugin "dsh-testing-example": loaded' in done.stderr
    assert f"dsh trust {(tmp_path / 'dsh.toml').resolve()}" in done.stderr
    assert "--trust" in done.stderr
    assert "serving" not in done.stderr

    log = tmp_path / "trusted.stderr"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [*argv, "--trust"],
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
            cwd=tmp_path,
            env=dict(os.environ),
        )
    try:
        deadline = time.monotonic() + 90
        while "dsh a2a: serving" not in log.read_text(errors="replace"):
            assert process.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        finally:
            if process.returncode is None:
                process.kill()
                process.wait()
    assert not (tmp_path / "state" / "trusted.json").exists()  # --trust records nothing
