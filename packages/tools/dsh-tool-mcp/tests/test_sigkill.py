"""An MCP server never outlives its dsh process, even when that process is SIGKILLed:
the watchdog kills its process group and everything carrying its run tag."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dsh.testing.processes import alive, wait_until_gone

pytestmark = pytest.mark.timeout(30)

OWNER = str(Path(__file__).with_name("_owner.py"))


def test_a_sigkilled_dsh_process_takes_its_mcp_server_and_helpers_along() -> None:
    owner = subprocess.Popen([sys.executable, OWNER], stdout=subprocess.PIPE)
    pids: list[int] = []
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line, f"{OWNER} printed nothing (exit {owner.wait()})"
        info = json.loads(line)
        pids = [info["server"], info["helper"], info["watchdog"]]
        assert all(alive(pid) for pid in pids)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        wait_until_gone(pids, 10.0)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
        for pid in pids:  # a failed test must not leave its tree behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
