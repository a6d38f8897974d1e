"""The rules the conformance suite checks, and how a broken one reads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = [
    "RULE_ABORT_BEFORE",
    "RULE_ABORT_DURING",
    "RULE_CANCEL",
    "RULE_DISPOSE",
    "RULE_FAILURE",
    "RULE_GATE",
    "RULE_HARNESS",
    "RULE_NO_PROCESS",
    "RULE_ONE_PAIR",
    "RULE_OUTPUT",
    "RULE_PROGRESS",
    "RULE_QUIESCENT",
    "RULE_USAGE",
    "broken",
    "check",
    "within",
]

T = TypeVar("T")

RULE_OUTPUT = "a completed run settles with its output"
RULE_ONE_PAIR = "exactly one subagent/start and one subagent/end per run"
RULE_GATE = "the capability gate runs before start"
RULE_ABORT_BEFORE = "abort before publication raises and emits nothing"
RULE_ABORT_DURING = "abort during start raises or settles aborted"
RULE_CANCEL = "cancel after publication settles aborted within the bound"
RULE_DISPOSE = "dispose is idempotent and concurrent-safe"
RULE_QUIESCENT = "dispose leaves the child quiescent"
RULE_FAILURE = "a child failure settles error and never raises"
RULE_USAGE = "result.usage is a SubagentUsage"
RULE_PROGRESS = "progress ends when the run settles"
RULE_NO_PROCESS = "no child process is left"
RULE_HARNESS = "the harness's hang prompt keeps the child at work"


def broken(rule: str, what: str) -> AssertionError:
    """The failure of ``rule``: ``conformance rule '<rule>' broken: <what>``."""
    return AssertionError(f"conformance rule '{rule}' broken: {what}")


def check(condition: object, rule: str, what: str | Callable[[], str]) -> None:
    """Raise :func:`broken` unless ``condition`` holds (``what`` may be computed late)."""
    if not condition:
        raise broken(rule, what() if callable(what) else what)


async def within(seconds: float, awaitable: Awaitable[T], rule: str, what: str) -> T:
    """``await awaitable`` for at most ``seconds``; past that, the rule is broken."""
    with anyio.move_on_after(seconds):
        return await awaitable
    raise broken(rule, f"{what} (waited {seconds:g} s)")
