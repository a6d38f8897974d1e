"""Fan-out: many concurrent spawn children on one event loop (issues 4 and 15).

Each configuration runs in a fresh process (so peak RSS and the collector's state
are its own); the scaling settings are interleaved over ``--rounds`` rounds and the
medians reported:

* memory: N children started at once (all alive together) with an instant
  model; peak RSS growth (VmHWM) per child. Target ≤ 10 KiB per concurrent
  delegation.
* wall: 1,000 children whose model sleeps 50 ms per call. Target ≤ 0.5 s.
* scaling: per-run cost with an instant model at concurrency 1, 100, 1,000 and
  10,000 (``--runs`` delegations per setting, started ``concurrency`` at a time and
  gathered); concurrency 1 (one child at a time) is the baseline of the same run.
  Target: ≤ 1.3x the baseline at every concurrency **with the garbage collector
  on**. Also printed: the same with the collector off, and with CPython's default
  collector schedule (``DSH_GC_TUNING=off``), and the collector's own time per run
  (``gc.callbacks``).

    uv run python tools/bench/bench_fanout.py [--rounds 3] [--runs 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from _bench import write_json

from dsh.core import AbortSignal, Context, ScriptedAdapter, ScriptedReply, parse_preset
from dsh.core.models import BoundModel
from dsh.subagent import SubagentResult, SubagentRun, SubagentRuntime, SubagentStartRequest

PRESET = parse_preset(
    '[agent.model]\nadapter = "scripted"\n[[plugin]]\nname = "dsh-subagent-spawn-in-process"\n'
)
CONCURRENCY = (1, 100, 1000, 10_000)


def peak_rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


class GcClock:
    """Time spent in the collector, per generation (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.seconds[generation] += time.perf_counter() - self._started
            self.collections[generation] += 1


async def result_of(run: SubagentRun) -> SubagentResult:
    return await run.result


async def worker(children: int, delay: float, batch: int, collector: str) -> dict[str, Any]:
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
            results = await asyncio.gather(*(result_of(run) for run in runs))
            assert all(r.output == "child answer" for r in results), results[:3]
            for run in runs:
                await run.dispose()

        await wave(min(batch, 50))  # warm up: imports, caches, allocator arenas
        if collector == "off":
            gc.disable()
        gc.collect()
        clock = GcClock()
        gc.callbacks.append(clock)
        before = peak_rss_kib()
        started, cpu_started = time.perf_counter(), time.process_time()
        done = 0
        while done < children:
            count = min(batch, children - done)
            await wave(count)
            done += count
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        growth = peak_rss_kib() - before
        gc.callbacks.remove(clock)
        gc.enable()
        garbage = gc.collect()
    return {
        "elapsed_s": elapsed,
        "per_run_us": elapsed / children * 1e6,
        "per_run_cpu_us": cpu / children * 1e6,
        "rss_growth_kib": growth,
        "gc_us_per_run": sum(clock.seconds) / children * 1e6,
        "collections": clock.collections,
        "thresholds": list(gc.get_threshold()),
        "garbage_after": garbage,
    }


def run_worker(children: int, delay: float, batch: int, collector: str) -> dict[str, Any]:
    env = dict(os.environ)
    if collector == "cpython":
        env["DSH_GC_TUNING"] = "off"
    out = subprocess.run(
        [sys.executable, __file__, "--worker", str(children), str(delay), str(batch), collector],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main(rounds: int, runs: int, collectors: list[str], json_path: str | None = None) -> int:
    summary: dict[str, Any] = {"memory": [], "scaling": {"runs": runs, "rounds": rounds}}
    for alive in (1000, 10_000):
        memory = run_worker(alive, 0.0, alive, "on")
        per_child = memory["rss_growth_kib"] / alive
        summary["memory"].append({"alive": alive, "kib_per_delegation": per_child})
        print(f"[memory] {alive:,} spawn children alive at once, instant model")
        growth = memory["rss_growth_kib"]
        print(
            f"  peak RSS growth {growth:,.0f} KiB = {per_child:.1f} KiB per concurrent"
            " delegation (target ≤ 10 KiB)"
        )

    slow = run_worker(1000, 0.05, 1000, "on")
    summary["wall"] = {"children": 1000, "model_delay_s": 0.05, "elapsed_s": slow["elapsed_s"]}
    print("\n[wall] 1,000 concurrent spawn children, model sleeps 50 ms per call")
    print(f"  wall {slow['elapsed_s']:.3f} s (target ≤ 0.5 s; the model alone takes 0.05 s)")

    print(
        f"\n[scaling] per-run cost with an instant model ({runs:,} runs per setting,"
        f" median of {rounds} rounds, each setting in a fresh process)"
    )
    samples: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for collector in collectors:
            for concurrency in CONCURRENCY:
                figures = run_worker(runs, 0.0, concurrency, collector)
                samples.setdefault((collector, concurrency), []).append(figures)
    labels = {
        "on": "GC on (dsh's schedule)",
        "cpython": "GC on, CPython's default schedule",
        "off": "GC off",
    }
    for collector in collectors:
        print(f"  {labels[collector]}:")
        rows = samples[(collector, 1)]
        base = statistics.median(f["per_run_us"] for f in rows)
        base_cpu = statistics.median(f["per_run_cpu_us"] for f in rows)
        for concurrency in CONCURRENCY:
            rows = samples[(collector, concurrency)]
            per_run = statistics.median(f["per_run_us"] for f in rows)
            per_run_cpu = statistics.median(f["per_run_cpu_us"] for f in rows)
            gc_time = statistics.median(f["gc_us_per_run"] for f in rows)
            full = statistics.median(f["collections"][2] for f in rows)
            target = " (target ≤ 1.3x)" if collector == "on" and concurrency > 1 else ""
            summary["scaling"].setdefault(collector, []).append(
                {"concurrency": concurrency, "per_run_us": per_run, "per_run_cpu_us": per_run_cpu}
            )
            print(
                f"    concurrency {concurrency:>6,}: wall {per_run:6.1f} µs per run"
                f" = {per_run / base:.2f}x concurrency 1{target};"
                f" CPU {per_run_cpu:6.1f} µs = {per_run_cpu / base_cpu:.2f}x;"
                f" collector {gc_time:5.1f} µs per run, {full:g} full collections"
            )
    print(
        "  (wall is the target's measure; CPU time, the process's own, is steadier on a"
        " shared machine)"
    )
    if json_path:
        write_json(json_path, "tools/bench/bench_fanout.py", summary)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", nargs=4, metavar=("CHILDREN", "DELAY", "BATCH", "GC"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument(
        "--collectors",
        default="on,cpython,off",
        help="comma-separated: on (dsh's schedule), cpython (DSH_GC_TUNING=off), off",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    args = parser.parse_args()
    if args.worker:
        children, delay, batch = int(args.worker[0]), float(args.worker[1]), int(args.worker[2])
        print(json.dumps(asyncio.run(worker(children, delay, batch, args.worker[3]))))
        sys.exit(0)
    sys.exit(main(args.rounds, args.runs, args.collectors.split(","), args.json))
