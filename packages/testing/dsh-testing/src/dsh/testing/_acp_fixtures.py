"""Fixtures for tests that start ``dsh`` processes (``dsh acp``, ``dsh run``): the
dsh-cli and dsh-acp test suites take them into their ``conftest.py``::

    from dsh.testing._acp_fixtures import dsh_state_dir, dsh_watchdogs_gone

and the preset text the ``dsh acp`` tests share (:func:`hello_preset`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from dsh.testing.fixtures import keyed_preset, keyed_rule
from dsh.testing.processes import cmdline, live_children

__all__ = [
    "ECHO_TOOL_RULE",
    "HELLO",
    "WATCHDOG_MARK",
    "dsh_state_dir",
    "dsh_watchdogs_gone",
    "hello_preset",
]

WATCHDOG_MARK = "dsh-watchdog"
"""In the command line of the watchdog process a dsh process that runs children starts."""


@pytest.fixture(autouse=True)
def dsh_state_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test (and every dsh it starts) records workspace trust in a folder of its
    own, never in the user's state directory."""
    monkeypatch.setenv("DSH_STATE_DIR", str(tmp_path_factory.mktemp("dsh-state")))


@pytest.fixture(autouse=True)
def dsh_watchdogs_gone() -> Iterator[None]:
    """A dsh process that ran a child process (the shell tool, an ACP child) leaves its
    watchdog behind for a moment after it exits: the watchdog sees the pipe close,
    sweeps, and exits. Wait (up to 10 s) for that before the dsh-testing plugin counts
    leftover processes, so a test fails only for a process that really stays."""
    yield
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not any(WATCHDOG_MARK in cmdline(pid) for pid in live_children()):
            return
        time.sleep(0.05)


HELLO = "Hello from dsh: {prompt}"
"""The ``dsh acp`` test presets' default answer."""

ECHO_TOOL_RULE = keyed_rule(
    "use the tool",
    {"tool_calls": [{"name": "echo", "arguments": {"text": "ping"}}]},
    {"text": "The tool said: {tool_results}", "chunks": 2},
)
"""A prompt containing "use the tool": the model calls ``echo`` (plugin
``dsh-testing-example``) with ``ping``, then says what it returned."""


def hello_preset(*rules: str, chunks: int | None = None, plugins: str = "") -> str:
    """A keyed-model preset (:func:`dsh.testing.fixtures.keyed_preset`) whose default
    answer is :data:`HELLO` (in ``chunks`` chunks), after ``rules``."""
    reply: dict[str, Any] = {"text": HELLO}
    if chunks is not None:
        reply["chunks"] = chunks
    return keyed_preset(*rules, default=[reply], plugins=plugins)
