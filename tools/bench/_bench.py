"""Shared helpers for dsh benchmarks: timing, statistics and reporting.

Every benchmark prints its figures next to a baseline measured in the same run,
so ratios stay meaningful on a noisy or slower machine.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Awaitable, Callable

__all__ = ["Timing", "measure_async", "report_ratio"]


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


def report_ratio(label: str, value: float, baseline: float) -> str:
    """``label: value / baseline = ratio``."""
    ratio = value / baseline
    return f"{label}: {value * 1e6:.1f} µs vs {baseline * 1e6:.1f} µs baseline = {ratio:.2f}x"
