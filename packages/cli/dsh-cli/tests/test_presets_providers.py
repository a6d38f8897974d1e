"""``dsh presets providers``: the installed subagent providers (the ``dsh.providers``
entry points) and the plugin row that registers each, run as a real process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(60)


def test_lists_the_installed_providers_and_their_rows(tmp_path: Path) -> None:
    # one more distribution, not named dsh-*, whose module does not even exist: the
    # listing reads metadata and imports nothing
    metadata = {
        "METADATA": ["Metadata-Version: 2.1", "Name: acme-agents", "Version: 2.0"],
        "entry_points.txt": [
            "[dsh.plugins]",
            "acme-agents = acme_absent:plugin",
            "",
            "[dsh.providers]",
            "acme = acme_absent:plugin",
        ],
    }
    (tmp_path / "acme_agents-2.0.dist-info").mkdir()
    for file, lines in metadata.items():
        (tmp_path / "acme_agents-2.0.dist-info" / file).write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = run_cli("dsh.cli", ["presets", "providers"], env=env, timeout=50)
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["provider", "plugin"]
    table = dict(row.split() for row in rows)
    # dsh-cli installs these providers itself
    assert table["spawn"] == "dsh-subagent-spawn-in-process"
    assert table["fork"] == "dsh-subagent-fork-in-process"
    assert table["acp"] == "dsh-subagent-acp"
    assert table["acme"] == "acme-agents"
    assert list(table) == sorted(table)
