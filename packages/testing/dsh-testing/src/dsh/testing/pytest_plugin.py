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
from collections.abc import Generator, Iterator

import pytest

from dsh.testing.processes import describe, live_children, reap_zombies

_PR_SET_CHILD_SUBREAPER = 36


def pytest_configure(config: pytest.Config) -> None:
    """Become a child subreaper (Linux only; elsewhere only direct children are seen)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    """Under ``CI=true`` a skipped test is a failure: a missing prerequisite must not
    pass silently."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and _in_ci() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which must not skip: {reason}"


@pytest.fixture
def anyio_backend() -> str:
    """dsh runs on asyncio."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_leaked_processes() -> Iterator[None]:
    """Fail a test that leaves a live process (child or orphaned descendant) behind."""
    before = live_children()
    yield
    reap_zombies()
    leaked = sorted(live_children() - before)
    if leaked:
        pytest.fail("test left processes running:\n" + "\n".join(describe(p) for p in leaked))
