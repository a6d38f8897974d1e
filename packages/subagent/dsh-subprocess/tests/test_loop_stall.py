"""Issue 10 item 8: fanning out to many processes must not freeze the event loop.

Spawns run in worker threads (no fork on the loop thread), exits are watched through
pidfds, and process scans (group checks, tag sweeps) happen off the loop. A 5 ms ticker
task measures the longest time the loop went without running it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TypeVar

import pytest

from dsh.subprocess import ChildProcess, RunTag, scrubbed_env
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

CHILDREN = 200
BOUND = 0.25
"""Seconds: generous for a loaded 2-core machine (the bench reports the real figure)."""
ATTEMPTS = 3

T = TypeVar("T")


class Ticker:
    def __init__(self) -> None:
        self.max_gap = 0.0

    async def run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            self.max_gap = max(self.max_gap, now - last)
            last = now


@asynccontextmanager
async def ticking() -> AsyncIterator[Ticker]:
    ticker = Ticker()
    task = asyncio.get_running_loop().create_task(ticker.run())
    await asyncio.sleep(0.02)
    ticker.max_gap = 0.0
    try:
        yield ticker
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def timed(work: Awaitable[T]) -> tuple[T, float, float]:
    """``(result, wall seconds, longest loop stall in seconds)``."""
    async with ticking() as ticker:
        started = time.perf_counter()
        result = await work
        wall = time.perf_counter() - started
        await asyncio.sleep(0.01)  # a last tick after the work
    return result, wall, ticker.max_gap


async def _starts_and_teardowns(before: set[int]) -> tuple[float, float]:
    """200 concurrent starts, then 200 concurrent teardowns: the longest loop stall of
    each, in seconds; nothing is left running."""
    children: list[ChildProcess] = []

    async def start_one() -> ChildProcess:
        child = await ChildProcess.start(["sleep", "30"], env=scrubbed_env(), cwd="/", tag=RunTag())
        children.append(child)
        return child

    try:
        started, start_wall, start_stall = await timed(
            asyncio.gather(*(start_one() for _ in range(CHILDREN)))
        )
        assert len(started) == CHILDREN
        assert len(live_children() - before) == CHILDREN
        endings, stop_wall, stop_stall = await timed(
            asyncio.gather(*(c.terminate(eof_grace=0.1, term_grace=2) for c in started))
        )
    finally:
        for child in children:  # a failed start must not leave the others behind
            child.kill_tree()
        for child in children:
            await child.terminate(eof_grace=0, term_grace=0)
    assert set(endings) == {"terminated"}
    assert live_children() - before == set()
    print(
        f"\n{CHILDREN} starts: {start_wall:.2f} s, longest stall {start_stall * 1e3:.0f} ms;"
        f" {CHILDREN} teardowns: {stop_wall:.2f} s, longest stall {stop_stall * 1e3:.0f} ms"
    )
    return start_stall, stop_stall


async def test_200_concurrent_starts_and_teardowns_keep_the_loop_responsive() -> None:
    """A loop that forks or scans on its own thread stalls for far longer than BOUND in
    every attempt; a busy machine (other processes taking the cores) can stall any one
    attempt past it. So: up to ATTEMPTS attempts, the first within BOUND passes."""
    before = live_children()
    stalls: list[tuple[float, float]] = []
    for _ in range(ATTEMPTS):
        start_stall, stop_stall = await _starts_and_teardowns(before)
        stalls.append((start_stall, stop_stall))
        if start_stall < BOUND and stop_stall < BOUND:
            return
    seen = "; ".join(f"starts {a * 1e3:.0f} ms, teardowns {b * 1e3:.0f} ms" for a, b in stalls)
    raise AssertionError(f"the loop stalled {BOUND * 1e3:.0f} ms or more in every attempt: {seen}")
