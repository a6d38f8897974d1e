"""What every peer worker shares: the measured loop and its JSON answer.

A worker measures one framework in its own process: a parent agent's turn that calls
one tool and then answers, once with a tool that delegates to a child agent (whose
fake model answers at once) and once with a tool that returns a constant; the two
are interleaved in ten slices so drift hits both. It prints one JSON object with
the per-turn samples (seconds) of each variant. No network: every model is a fake
that answers at once, and tracing/telemetry export is off.

Shared with tools/bench/_bench.py's measure_async on purpose: warm-up runs, the
garbage collector collected and disabled while timing, perf_counter per turn.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable

Turn = Callable[[], Awaitable[str]]


async def _samples(turn: Turn, iterations: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        await turn()
    out: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(iterations):
            started = time.perf_counter()
            await turn()
            out.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return out


async def measure(delegating: Turn, constant: Turn, iterations: int) -> dict[str, list[float]]:
    """Check that both turns answer with the child's answer, then time them."""
    for name, turn in (("delegating", delegating), ("constant", constant)):
        answer = await turn()
        if answer != "done: child answer":  # a benchmark of a failing call proves nothing
            raise SystemExit(f"the {name} turn does not work: it answered {answer!r}")
    with_child: list[float] = []
    without: list[float] = []
    slices = 10
    for _ in range(slices):
        with_child += await _samples(delegating, iterations // slices, warmup=20)
        without += await _samples(constant, iterations // slices, warmup=20)
    return {"delegating": with_child, "constant": without}


def main(build: Callable[[], tuple[Turn, Turn]], version: str) -> None:
    """``python worker.py ITERATIONS``: build the two turns, measure, print JSON."""
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 1000

    async def run() -> dict[str, list[float]]:
        delegating, constant = build()
        return await measure(delegating, constant, iterations)

    samples = asyncio.run(run())
    print(json.dumps({"version": version, **samples}))
