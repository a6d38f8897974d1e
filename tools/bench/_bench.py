"""Shared helpers for dsh benchmarks: timing, statistics and reporting.

Every benchmark prints its figures next to a baseline measured in the same run,
so ratios stay meaningful on a noisy or slower machine.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["Timing", "measure_async", "measure_interleaved", "report_ratio", "write_json"]


class Timing:
    """Per-iteration samples in seconds."""

    def __init__(self, name: str, samples: list[float]) -> None:
        self.name = name
        self.samples = samples

    @property
    def median(self) -> float:
        """Median seconds per iteration."""
        return statistics.median(self.samples)

    def p(self, q: float) -> float:
        """The q-quantile (0..1) in seconds."""
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def line(self) -> str:
        """A one-line summary in microseconds."""
        return (
            f"{self.name:<44} median {self.median * 1e6:9.1f} µs   "
            f"p10 {self.p(0.1) * 1e6:9.1f}   p90 {self.p(0.9) * 1e6:9.1f}   (n={len(self.samples)})"
        )


async def measure_async(
    name: str, fn: Callable[[], Awaitable[object]], *, iterations: int, warmup: int = 200
) -> Timing:
    """Time ``await fn()`` ``iterations`` times after ``warmup`` runs (GC off while timing)."""
    for _ in range(warmup):
        await fn()
    samples: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(iterations):
            started = time.perf_counter()
            await fn()
            samples.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return Timing(name, samples)


async def measure_interleaved(
    fns: dict[str, Callable[[], Awaitable[object]]], *, iterations: int, warmup: int = 50
) -> dict[str, Timing]:
    """Time each of ``fns`` ``iterations`` times, one call of each in turn (the order
    rotating each pass), after ``warmup`` passes (GC off while timing). A slower
    moment of the machine then lands on every variant alike instead of on whichever
    block of calls it fell in: use this for ratios of a few percent."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            await fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    calls = [(samples[name], fns[name]) for name in names]
    gc.collect()
    gc.disable()
    try:
        clock = time.perf_counter
        for i in range(iterations):
            shift = i % len(calls)
            for out, fn in calls[shift:] + calls[:shift]:
                started = clock()
                await fn()
                out.append(clock() - started)
    finally:
        gc.enable()
    return {name: Timing(name, samples[name]) for name in names}


def report_ratio(label: str, value: float, baseline: float) -> str:
    """``label: value / baseline = ratio``."""
    ratio = value / baseline
    return f"{label}: {value * 1e6:.1f} µs vs {baseline * 1e6:.1f} µs baseline = {ratio:.2f}x"


def write_json(path: str | os.PathLike[str], bench: str, results: dict[str, Any]) -> None:
    """Write a bench's ``results`` to ``path`` as JSON, with where and when they were
    measured (tools/docs/charts.py draws the docs' charts from these files)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    record = {
        "bench": bench,
        "measured_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "system": f"{platform.system()} {platform.machine()}",
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in load] if load else None,
        },
        **results,
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
