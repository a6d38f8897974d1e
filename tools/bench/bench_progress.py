"""What watching children costs (issue 12).

1. Delegation overhead (as ``bench_delegation.py``: a parent turn with a spawn
   delegation minus the same turn with a constant tool) two ways, interleaved in
   the same run: nobody watches; one subscriber reads every progress item (a
   ``subagent/progress`` bus listener, which turns progress on for every run).
2. A subscriber that never reads does not slow the child: a child streaming 2,000
   text deltas, timed with a ``run.progress()`` stream that another task reads to the
   end (a buffer large enough for every item: the baseline, what watching costs), with
   one that is never read (bounded buffer: the oldest items are dropped, the child
   never waits), and, for reference, with no subscriber at all (the items are then
   never built).

    uv run python tools/bench/bench_progress.py [--iterations N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator

from _bench import Timing, measure_async, write_json
from bench_delegation import PRESET, measured_parents

from dsh.core import AbortSignal, BusEvent, Context
from dsh.subagent import SubagentProgress, SubagentStartRequest


async def overheads(iterations: int) -> dict[str, Timing]:
    timings: dict[str, list[float]] = {k: [] for k in ("constant", "none", "reader")}
    async with Context.open(PRESET) as ctx:
        parents = await measured_parents(ctx, "subagent", "constant")
        delegating, baseline = parents["subagent"], parents["constant"]
        seen = [0]

        def read(event: BusEvent) -> None:
            item = event.data["item"]
            if item.kind:  # read every item
                seen[0] += 1

        for _ in range(10):
            for key, agent, watch in (
                ("constant", baseline, False),
                ("none", delegating, False),
                ("reader", delegating, True),
            ):
                off = ctx.events.on("subagent/progress", read) if watch else None
                timing = await measure_async(
                    key, lambda a=agent: a.run("go"), iterations=iterations // 10, warmup=50
                )
                if off is not None:
                    off()
                timings[key] += timing.samples
        if not seen[0]:
            raise SystemExit("the reader saw no progress item: the bench measures nothing")
    return {k: Timing(k, v) for k, v in timings.items()}


async def slow_subscriber(rounds: int) -> tuple[float, float, float, int]:
    options = {
        "model": {
            "adapter": "scripted",
            "options": {"replies": [{"text": "x " * 2000, "chunks": 2000}]},
        }
    }
    times: dict[str, list[float]] = {"none": [], "reader": [], "never": []}
    dropped = 0
    async with Context.open(PRESET) as ctx:
        parent = ctx.agents.create(persist=False)

        async def drain(stream: AsyncIterator[SubagentProgress], count: list[int]) -> None:
            async for _ in stream:
                count[0] += 1

        for _ in range(rounds):
            for key, target in times.items():
                started = time.perf_counter()
                request = SubagentStartRequest("go", parent, AbortSignal(), agent_options=options)
                run = await ctx.subagents.start("spawn", request)
                stream = (
                    None if key == "none" else run.progress(buffer=4096 if key == "reader" else 64)
                )
                read = [0]
                reader = (
                    asyncio.ensure_future(drain(stream, read))
                    if key == "reader" and stream
                    else None
                )
                async with run:
                    result = await run.result
                if reader is not None:
                    await reader
                target.append(time.perf_counter() - started)
                assert result.stop_reason == "completed"
                if key == "reader" and read[0] < 2000:
                    raise SystemExit(f"the reader saw {read[0]} items: it should see every one")
                if key == "never" and stream is not None:
                    dropped = stream.dropped
    none, reader_time, never = (statistics.median(times[k]) for k in ("none", "reader", "never"))
    return none, reader_time, never, dropped


async def main(iterations: int, json_path: str | None) -> int:
    t = await overheads(iterations)
    base = t["constant"].median
    none = t["none"].median - base
    reader = t["reader"].median - base
    print("delegation overhead per delegation (same run, interleaved):")
    print(f"  nobody watches                   {none * 1e6:8.1f} µs")
    print(f"  one subscriber reads every item  {reader * 1e6:8.1f} µs   ({reader / none:.2f}x)")
    plain, reading, never, dropped = await slow_subscriber(30)
    print("child streaming 2,000 deltas, start → result → dispose (median of 30, interleaved):")
    print(f"  a subscriber that reads every item {reading * 1e3:8.2f} ms   (baseline)")
    print(
        f"  a subscriber that never reads      {never * 1e3:8.2f} ms   ({never / reading:.2f}x;"
        f" {dropped} items dropped, buffer 64)"
    )
    print(f"  no subscriber (items never built)  {plain * 1e3:8.2f} ms   ({plain / reading:.2f}x)")
    if json_path:
        write_json(
            json_path,
            "tools/bench/bench_progress.py",
            {
                "overhead_us": {"none": none * 1e6, "reader": reader * 1e6},
                "slow_subscriber_ms": {
                    "none": plain * 1e3,
                    "reads_all": reading * 1e3,
                    "never_reads": never * 1e3,
                },
            },
        )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10000)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.iterations, args.json)))
