"""What watching children costs (issue 12).

1. Delegation overhead (as ``bench_delegation.py``: a parent turn with a spawn
   delegation minus the same turn with a constant tool) two ways, interleaved in
   the same run: nobody watches; one subscriber reads every progress item (a
   ``subagent/progress`` bus listener, which turns progress on for every run).
2. A subscriber that never reads does not slow the child: a child streaming 2,000
   text deltas, timed with no subscriber and with a ``run.progress()`` stream that is
   never read (bounded buffer: the oldest items are dropped).

    uv run python tools/bench/bench_progress.py [--iterations N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from _bench import Timing, measure_async, write_json
from bench_delegation import PRESET, Args, parent_model

from dsh.core import AbortSignal, BusEvent, Context, Tool, ToolContext
from dsh.subagent import SubagentStartRequest


async def overheads(iterations: int) -> dict[str, Timing]:
    timings: dict[str, list[float]] = {k: [] for k in ("constant", "none", "reader")}
    async with Context.open(PRESET) as ctx:

        async def constant(args: Args, tctx: ToolContext) -> str:
            return "child answer"

        ctx.tools.register(Tool.from_model("constant", "constant", Args, constant))
        delegating = ctx.agents.create(model=parent_model("subagent"), persist=False)
        baseline = ctx.agents.create(model=parent_model("constant"), persist=False)
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


async def slow_subscriber(rounds: int) -> tuple[float, float, int]:
    options = {
        "model": {
            "adapter": "scripted",
            "options": {"replies": [{"text": "x " * 2000, "chunks": 2000}]},
        }
    }
    plain: list[float] = []
    watched: list[float] = []
    dropped = 0
    async with Context.open(PRESET) as ctx:
        parent = ctx.agents.create(persist=False)
        for _ in range(rounds):
            for target in (plain, watched):
                started = time.perf_counter()
                request = SubagentStartRequest("go", parent, AbortSignal(), agent_options=options)
                run = await ctx.subagents.start("spawn", request)
                stream = run.progress(buffer=64) if target is watched else None
                async with run:
                    result = await run.result
                target.append(time.perf_counter() - started)
                assert result.stop_reason == "completed"
                if stream is not None:
                    dropped = stream.dropped
    return statistics.median(plain), statistics.median(watched), dropped


async def main(iterations: int, json_path: str | None) -> int:
    t = await overheads(iterations)
    base = t["constant"].median
    none = t["none"].median - base
    reader = t["reader"].median - base
    print("delegation overhead per delegation (same run, interleaved):")
    print(f"  nobody watches                   {none * 1e6:8.1f} µs")
    print(f"  one subscriber reads every item  {reader * 1e6:8.1f} µs   ({reader / none:.2f}x)")
    plain, watched, dropped = await slow_subscriber(30)
    print("child streaming 2,000 deltas, start → result → dispose (median of 30):")
    print(f"  no subscriber                    {plain * 1e3:8.2f} ms")
    print(
        f"  a subscriber that never reads    {watched * 1e3:8.2f} ms   ({watched / plain:.2f}x;"
        f" {dropped} items dropped, buffer 64)"
    )
    if json_path:
        write_json(
            json_path,
            "tools/bench/bench_progress.py",
            {
                "overhead_us": {"none": none * 1e6, "reader": reader * 1e6},
                "slow_subscriber_ms": {"none": plain * 1e3, "never_reads": watched * 1e3},
            },
        )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10000)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.iterations, args.json)))
