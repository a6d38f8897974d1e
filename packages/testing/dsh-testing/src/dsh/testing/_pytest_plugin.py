"""The code behind :mod:`dsh.testing.pytest_plugin` (its docstring says what it is)."""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Generator, Iterator

import pytest

from dsh.testing._processes import describe, live_children, reap_zombies
from dsh.testing._tape_fixture import add_record_option

__all__ = [
    "LEAK_GRACE",
    "anyio_backend",
    "no_leaked_processes",
    "pytest_addoption",
    "pytest_configure",
    "pytest_runtest_makereport",
]

_PR_SET_CHILD_SUBREAPER = 36


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--record-tapes`` (the ``tape`` fixture records instead of replaying)."""
    add_record_option(parser)


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


LEAK_GRACE = 5.0
"""Seconds a test's leftover processes get to finish dying before the test fails."""


@pytest.fixture(autouse=True, name="_no_leaked_processes")
def no_leaked_processes() -> Iterator[None]:
    """Fail a test that leaves a live process (child or orphaned descendant) behind.

    A process still on its way out when the test returns (a sandbox's init killed by
    its parent's death, reparented here, not yet reaped) gets :data:`LEAK_GRACE`
    seconds to go: the condition is waited for, never sampled once."""
    before = live_children()
    yield
    deadline = time.monotonic() + LEAK_GRACE
    while True:
        reap_zombies()
        leaked = sorted(live_children() - before)
        if not leaked or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if leaked:
        pytest.fail("test left processes running:\n" + "\n".join(describe(p) for p in leaked))
