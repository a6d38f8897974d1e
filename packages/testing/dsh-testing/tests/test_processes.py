"""The process table as tests see it, through /proc where it exists and through psutil
(the only way off Linux): both answer the same."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator

import pytest

from dsh.testing import _processes as backends
from dsh.testing.processes import (
    alive,
    cmdline,
    descendants,
    describe,
    live_children,
    process_tree,
    reap_zombies,
    wait_until_gone,
)

pytestmark = pytest.mark.timeout(30)

BACKENDS = ["psutil", "proc"] if backends._USE_PROC else ["psutil"]

PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
print(child.pid, flush=True)
time.sleep(30)
"""


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(backends, "_USE_PROC", request.param == "proc")
    return str(request.param)


@pytest.fixture
def tree() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A child (in its own process group) with a grandchild; both killed afterwards."""
    child = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        yield child, grandchild
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()  # type: ignore[union-attr]
        wait_until_gone([grandchild], 5)
        reap_zombies()


def test_children_descendants_and_trees(
    backend: str, tree: tuple[subprocess.Popen[str], int]
) -> None:
    child, grandchild = tree
    assert child.pid in live_children()
    assert grandchild not in live_children()  # not ours: a grandchild
    assert alive(child.pid)
    assert alive(grandchild)
    assert {child.pid, grandchild} <= descendants(os.getpid())
    assert descendants(child.pid) == {grandchild}
    assert process_tree([child.pid]) == {child.pid, grandchild}
    assert "time.sleep(30)" in cmdline(grandchild)
    assert describe(grandchild).startswith(f"{grandchild}: ")


def test_gone_and_zombie_processes(backend: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while alive(child.pid):  # exits, and stays a zombie until reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert child.pid not in live_children()
    assert process_tree([child.pid]) == set()
    assert cmdline(child.pid) == ""
    reap_zombies()
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # reaped already
    child.returncode = 0  # tell Popen, which would reap it too
    assert not alive(child.pid)
    assert cmdline(2**22 + 12345) == ""
    assert not alive(2**22 + 12345)


def test_the_dsh_watchdog_is_not_counted(
    backend: str, tree: tuple[subprocess.Popen[str], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    child, _ = tree
    watchdog = types.SimpleNamespace(pid=child.pid)
    fake = types.ModuleType("dsh.subprocess")
    fake.watchdog = lambda: watchdog  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dsh.subprocess", fake)
    assert child.pid not in live_children()
    monkeypatch.delitem(sys.modules, "dsh.subprocess")
    assert child.pid in live_children()
