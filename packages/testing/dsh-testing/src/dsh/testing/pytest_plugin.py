"""Pytest plugin registered by dsh-testing (entry point ``pytest11``).

Runs async tests on asyncio through anyio, and checks after every test that it
left no process behind. The test runner makes itself a *child subreaper*
(Linux ``PR_SET_CHILD_SUBREAPER``), so orphaned grandchildren (a product CLI's
tool processes, a child whose parent died) are re-parented to it and counted
too, instead of escaping to init.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator

import pytest

_PR_SET_CHILD_SUBREAPER = 36


def pytest_configure(config: pytest.Config) -> None:
    """Become a child subreaper (Linux only; elsewhere only direct children are seen)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass


@pytest.fixture
def anyio_backend() -> str:
    """dsh runs on asyncio."""
    return "asyncio"


def _children() -> dict[int, str]:
    """Direct children of this process: pid -> state letter."""
    pid = os.getpid()
    found: dict[int, str] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        rest = stat.rsplit(")", 1)[-1].split()
        if len(rest) > 2 and int(rest[1]) == pid:
            found[int(entry)] = rest[0]
    return found


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return f"{pid}: {handle.read().replace(bytes(1), b' ').decode(errors='replace')[:200]}"
    except OSError:
        return str(pid)


def _reap_orphan_zombies(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


@pytest.fixture(autouse=True)
def _no_leaked_processes() -> Iterator[None]:
    """Fail a test that leaves a live process (child or orphaned descendant) behind."""
    before = set(_children())
    yield
    after = _children()
    new = {pid: state for pid, state in after.items() if pid not in before}
    _reap_orphan_zombies({pid for pid, state in new.items() if state == "Z"})
    leaked = sorted(pid for pid, state in new.items() if state != "Z")
    if leaked:
        pytest.fail(
            "test left processes running:\n" + "\n".join(_describe(pid) for pid in leaked)
        )
