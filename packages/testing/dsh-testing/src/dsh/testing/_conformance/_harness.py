"""What a provider hands the conformance suite, and the process check it shares."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from dsh.core import AbortSignal, Agent, Context
from dsh.subagent import SubagentRun, SubagentRuntime, SubagentStartRequest
from dsh.testing._conformance._rules import RULE_HARNESS, RULE_NO_PROCESS, broken, within
from dsh.testing._processes import describe, live_children, reap_zombies

__all__ = [
    "ConformanceHarness",
    "assert_no_new_processes",
    "counted_children",
    "wait_no_new_processes",
    "wait_running",
]

PUBLIC_MODULE = "dsh.testing.conformance"


def counted_children() -> set[int]:
    """The live children the suite counts: ``dsh.testing.conformance.live_children()``.

    That name is the suite's one replaceable hook: a provider's tests may replace it
    (``monkeypatch.setattr(conformance, "live_children", ...)``) to leave out the idle
    processes of a warm pool, which belong to no run. Read at each call, so the
    replacement holds for every check of the suite."""
    public = sys.modules.get(PUBLIC_MODULE)
    table: Callable[[], set[int]] = getattr(public, "live_children", live_children)
    return table()


@dataclass
class ConformanceHarness:
    """What the suite needs to drive one provider."""

    ctx: Context
    provider: str
    """Registered provider name."""
    parent: Agent
    complete_prompt: str
    """A prompt the child completes."""
    expected_output: str | Callable[[str], bool]
    """The completed output, or a predicate on it."""
    hang_prompt: str
    """A prompt the child keeps working on until cancelled."""
    fail_prompt: str
    """A prompt the child fails on (model error, crash...): settles ``error``."""
    cancel_bound: float = 5.0
    """Seconds within which a cancelled run must settle ``aborted``."""
    wait_until_running: Callable[[SubagentRun], Awaitable[None]] | None = None
    """Wait until the hanging child is really at work (default: a short sleep)."""
    start_signal_grace: float = 0.05
    """Seconds to let a child get going before cancelling when there is no waiter."""
    run_bound: float = 60.0
    """Seconds within which a completing or failing run must settle."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def runtime(self) -> SubagentRuntime:
        """The context's subagent runtime."""
        return SubagentRuntime.of(self.ctx)

    def request(
        self, prompt: str, signal: AbortSignal | None = None, **fields: Any
    ) -> SubagentStartRequest:
        """A start request from the harness's parent."""
        return SubagentStartRequest(prompt, self.parent, signal or AbortSignal(), **fields)

    def output_ok(self, output: str) -> bool:
        """Does ``output`` match what the completing prompt should give?"""
        if callable(self.expected_output):
            return self.expected_output(output)
        return output == self.expected_output


PROCESS_BOUND = 30.0
"""Seconds the process checks wait for the processes started since ``before`` to go:
an "eventually", generous so a loaded machine cannot fail it (a leaked process stays)."""


def assert_no_new_processes(
    before: set[int], *, within: float = PROCESS_BOUND, rule: str = RULE_NO_PROCESS
) -> None:
    """Assert that every process started since ``before`` is gone (within a grace)."""
    deadline = time.monotonic() + within
    while (extra := _new_processes(before)) and time.monotonic() <= deadline:
        time.sleep(0.02)
    if extra:
        raise _left_behind(extra, rule)


async def wait_no_new_processes(
    before: set[int], *, within: float = PROCESS_BOUND, rule: str = RULE_NO_PROCESS
) -> None:
    """:func:`assert_no_new_processes` that waits on the event loop (the tasks that close
    a process, a pool's included, run meanwhile)."""
    deadline = time.monotonic() + within
    while (extra := _new_processes(before)) and time.monotonic() <= deadline:
        await anyio.sleep(0.02)
    if extra:
        raise _left_behind(extra, rule)


def _new_processes(before: set[int]) -> set[int]:
    reap_zombies()
    return counted_children() - before


def _left_behind(extra: set[int], rule: str) -> AssertionError:
    return broken(
        rule, "processes left behind:\n" + "\n".join(describe(pid) for pid in sorted(extra))
    )


async def wait_running(harness: ConformanceHarness, run: SubagentRun) -> None:
    """Wait until the hanging child of ``run`` is at work (the harness's waiter, or its
    grace)."""
    if harness.wait_until_running is not None:
        await within(
            30, harness.wait_until_running(run), RULE_HARNESS, "wait_until_running never ended"
        )
    else:
        await anyio.sleep(harness.start_signal_grace)
