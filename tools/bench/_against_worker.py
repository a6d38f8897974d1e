"""One measurement for tools/bench/against_commit.py, run by a tree's own interpreter.

    python _against_worker.py BENCH_DIR timing ITERATIONS
    python _against_worker.py BENCH_DIR memory ALIVE

Imports ``bench_delegation`` or ``bench_fanout`` from BENCH_DIR (the tree's own
tools/bench) and measures, as one JSON line: the delegation overhead, the parent-only
turn and the asyncio floor (timing); the memory per concurrent delegation (memory, in
a process of its own so that its peak RSS is its own).
Written against what both trees offer (``measure(sessions_dir, iterations)`` and
``worker(children, delay, batch[, collector])``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import statistics
import sys
import time
from typing import Any


async def floor(iterations: int) -> float:
    """median(await a child coroutine as its own task) - median(await it directly), µs."""

    async def child() -> str:
        return "child answer"

    async def delegating() -> str:
        return await asyncio.ensure_future(child())

    direct: list[float] = []
    tasked: list[float] = []
    for _ in range(10):
        for samples, call in ((tasked, delegating), (direct, child)):
            for _ in range(iterations // 10):
                started = time.perf_counter()
                await call()
                samples.append(time.perf_counter() - started)
    return (statistics.median(tasked) - statistics.median(direct)) * 1e6


async def timing(iterations: int) -> dict[str, Any]:
    """Delegation overhead, parent-only turn and the asyncio floor, in µs."""
    import bench_delegation  # type: ignore[import-not-found]

    with_child, without = await bench_delegation.measure(None, iterations)
    return {
        "overhead_us": (with_child.median - without.median) * 1e6,
        "parent_turn_us": without.median * 1e6,
        "floor_us": await floor(iterations * 5),
    }


async def memory(alive: int) -> dict[str, Any]:
    """Peak RSS growth per concurrent delegation with ``alive`` spawn children at once."""
    import bench_fanout  # type: ignore[import-not-found]

    params = inspect.signature(bench_fanout.worker).parameters
    extra = ["on"] if len(params) > 3 else []
    figures = await bench_fanout.worker(alive, 0.0, alive, *extra)
    return {"kib_per_delegation": figures["rss_growth_kib"] / alive}


if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    mode, count = sys.argv[2], int(sys.argv[3])
    result = asyncio.run(timing(count) if mode == "timing" else memory(count))
    print(json.dumps(result))
