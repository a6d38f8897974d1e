"""A dsh process that ran a child process (the shell tool, an ACP child) leaves its
watchdog behind for a moment after it exits: the watchdog sees the pipe close, sweeps,
and exits. Wait for that before the dsh-testing plugin counts leftover processes, so a
test fails only for a process that really stays."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from dsh.testing.processes import cmdline, live_children

WATCHDOG_MARK = "dsh-watchdog"


@pytest.fixture(autouse=True)
def _private_trust_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test (and every dsh it starts) records workspace trust in a folder of its
    own, never in the user's state directory."""
    monkeypatch.setenv("DSH_STATE_DIR", str(tmp_path_factory.mktemp("dsh-state")))


@pytest.fixture(autouse=True)
def _let_exited_dsh_watchdogs_finish() -> Iterator[None]:
    yield
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not any(WATCHDOG_MARK in cmdline(pid) for pid in live_children()):
            return
        time.sleep(0.05)
