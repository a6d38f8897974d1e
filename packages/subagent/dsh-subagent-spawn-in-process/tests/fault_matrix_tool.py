"""The spawn fault matrix's parent-SIGKILL tool: ``fault_sleep`` runs ``sleep 300`` through
dsh.subprocess (loaded by the parent process of ``dsh.testing.faults``; not collected)."""

from __future__ import annotations

from dsh.subprocess import ChildProcess, RunTag, scrubbed_env
from dsh.testing.fixtures import fault_sleep_installer

install = fault_sleep_installer(
    lambda argv: ChildProcess.start(
        argv, env=scrubbed_env(), cwd="/", what="fault tool", tag=RunTag()
    )
)
