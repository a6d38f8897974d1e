"""``dsh worker`` in a folder with an untrusted ``dsh.toml``: refused before anything of
it loads (exit 2, how to trust it); ``--trust`` gets past the check."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(60)


def worker(cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "dsh.subagent_temporal",
        ["worker", *extra],
        cwd=cwd,
        env={**os.environ, "DSH_STATE_DIR": str(cwd / "state")},
        timeout=50,
    )


def test_an_untrusted_dsh_toml_is_refused_and_trust_gets_past_the_check(tmp_path: Path) -> None:
    (tmp_path / "dsh.toml").write_text(
        '[agent.model]\nadapter = "scripted"\n'
        '[[plugin]]\nname = "dsh-subagent-acp"\n'
        'config = { command = "sh", args = ["-c", "exit 3"], passthrough_env = ["TOKEN"] }\n'
    )
    refused = worker(tmp_path)
    assert refused.returncode == 2, refused.stderr
    resolved = (tmp_path / "dsh.toml").resolve()
    assert f"dsh worker: {resolved} is not trusted" in refused.stderr
    assert "plugin \"dsh-subagent-acp\": runs sh -c 'exit 3'" in refused.stderr
    assert "passes $TOKEN through to its process" in refused.stderr
    assert f"dsh trust {resolved}" in refused.stderr
    # With --trust the preset is used: the worker goes on to Temporal (none listens here).
    trusted = worker(tmp_path, "--trust", "--address", "127.0.0.1:1")
    assert "not trusted" not in trusted.stderr
    assert "Failed client connect" in trusted.stderr, trusted.stderr
    assert trusted.returncode == 1
