"""Fan-out: many concurrent spawn children on one event loop (issue 4).

Each configuration runs in a fresh process so peak RSS is its own:

* memory: N children started at once (all alive together) with an instant
  model; peak RSS growth (VmHWM) per child. Target ≤ 19 KiB.
* wall: 1,000 children whose model sleeps 50 ms per call. Target ≤ 0.5 s.
* scaling: per-run cost with an instant model at concurrency 1, 100 and 1,000;
  concurrency 1 (one child at a time) is the baseline of the same run. Target:
  per-run cost does not grow with concurrency.

    uv run python tools/bench/bench_fanout.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

from dsh.core import AbortSignal, BoundModel, Context, ScriptedAdapter, ScriptedReply, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest

PRESET = parse_preset(
    '[agent.model]\nadapter = "scripted"\n[[plugin]]\nname = "dsh-subagent-spawn-in-process"\n'
)


def peak_rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


async def worker(children: int, delay: float, batch: int) -> dict[str, float]:
    """Run ``children`` delegations, ``batch`` at a time; report time and memory."""
    async with Context.open(PRESET) as ctx:
        runtime = SubagentRuntime.of(ctx)
        parent = ctx.agents.create(
            model=BoundModel(ScriptedAdapter([ScriptedReply(text="child answer", delay=delay)]))
        )

        async def wave(count: int) -> None:
            runs = [
                await runtime.start("spawn", SubagentStartRequest("task", parent, AbortSignal()))
                for _ in range(count)
            ]
            results = await asyncio.gather(*(run.result.wait() for run in runs))
            assert all(r.output == "child answer" for r in results), results[:3]
            for run in runs:
                await run.dispose()

        await wave(min(batch, 50))  # warm up: imports, caches, allocator arenas
        before = peak_rss_kib()
        started = time.perf_counter()
        done = 0
        while done < children:
            count = min(batch, children - done)
            await wave(count)
            done += count
        elapsed = time.perf_counter() - started
        growth = peak_rss_kib() - before
    return {"elapsed_s": elapsed, "per_run_us": elapsed / children * 1e6, "rss_growth_kib": growth}


def run_worker(children: int, delay: float, batch: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", str(children), str(delay), str(batch)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main() -> int:
    memory = run_worker(1000, 0.0, 1000)
    per_child = memory["rss_growth_kib"] / 1000
    print("[memory] 1,000 spawn children alive at once, instant model")
    growth = memory["rss_growth_kib"]
    print(f"  peak RSS growth {growth:,.0f} KiB = {per_child:.1f} KiB per child (target ≤ 19 KiB)")

    slow = run_worker(1000, 0.05, 1000)
    print("\n[wall] 1,000 concurrent spawn children, model sleeps 50 ms per call")
    print(f"  wall {slow['elapsed_s']:.3f} s (target ≤ 0.5 s; the model alone takes 0.05 s)")

    print("\n[scaling] per-run cost with an instant model (10,000 runs per setting)")
    base = None
    for concurrency in (1, 100, 1000):
        figures = run_worker(10_000, 0.0, concurrency)
        base = base or figures["per_run_us"]
        print(
            f"  concurrency {concurrency:>5}: {figures['per_run_us']:7.1f} µs per run"
            f" = {figures['per_run_us'] / base:.2f}x concurrency 1"
        )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", nargs=3, metavar=("CHILDREN", "DELAY", "BATCH"))
    args = parser.parse_args()
    if args.worker:
        children, delay, batch = int(args.worker[0]), float(args.worker[1]), int(args.worker[2])
        print(json.dumps(asyncio.run(worker(children, delay, batch))))
        sys.exit(0)
    sys.exit(main())
