"""A sandboxed process lives as long as its run, not as long as the thread that
started it; a dsh process inside a sandbox does not take the tags of the dsh process
outside (in another PID namespace) for a dead owner's."""

from __future__ import annotations

import os
import threading
import time

import pytest

from dsh.core.permissions import SandboxPolicy
from dsh.subprocess import Sandbox
from dsh.subprocess._scan import owner_alive, owner_of_this_process
from dsh.subprocess._spawn import Spawn

pytestmark = pytest.mark.timeout(60)


def test_a_sandboxed_process_outlives_the_thread_that_started_it(tmp_path: object) -> None:
    # bwrap --die-with-parent dies with the thread that forked it: an anyio worker
    # thread exits after 10 s idle, which killed every sandbox it had started
    spawn = Spawn(["sleep", "30"], dict(os.environ), str(tmp_path), None, Sandbox(SandboxPolicy()))
    box: dict[str, object] = {}

    def start() -> None:
        box["popen"] = spawn.run()
        time.sleep(0.5)  # bubblewrap is up (and has set its parent-death signal)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    popen = box["popen"]
    assert hasattr(popen, "poll")
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert popen.poll() is None, "the sandbox died with the thread that started it"
            time.sleep(0.05)
    finally:
        popen.kill()
        popen.wait()


def test_an_owner_in_another_pid_namespace_is_not_judged_dead() -> None:
    pid, started, namespace = owner_of_this_process().split(".")
    assert owner_alive(f"{pid}.{started}.{namespace}")
    # pid 999999 does not exist here: dead in this namespace, unknown in another one
    assert not owner_alive(f"999999.1.{namespace}")
    assert owner_alive(f"999999.1.{int(namespace) + 1}")
    assert not owner_alive("999999.1")  # an owner id of before: judged as before
