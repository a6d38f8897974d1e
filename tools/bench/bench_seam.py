"""The seam's own overhead per delegation (issue 3).

Registry start → result → dispose with the scripted provider (the child does
nothing), against a bare asyncio task round trip (create a task that returns a
value, await it) measured in the same run.

    uv run python tools/bench/bench_seam.py [--iterations N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from _bench import measure_async, report_ratio

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.testing.scripted_provider import ScriptedProvider


async def main(iterations: int) -> None:
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(ScriptedProvider("scripted", reply="ok"))
        parent = ctx.agents.create()

        async def delegation() -> None:
            run = await runtime.start(
                "scripted", SubagentStartRequest("task", parent, AbortSignal())
            )
            await run.result
            await run.dispose()

        async def value() -> str:
            return "ok"

        async def bare_task() -> None:
            await asyncio.get_running_loop().create_task(value())

        # interleave rounds so drift affects both equally
        seam_samples: list[float] = []
        bare_samples: list[float] = []
        for _ in range(5):
            seam_samples += (
                await measure_async("seam", delegation, iterations=iterations // 5)
            ).samples
            bare_samples += (
                await measure_async("bare", bare_task, iterations=iterations // 5)
            ).samples
        from _bench import Timing

        seam = Timing("registry start → result → dispose", seam_samples)
        bare = Timing("bare asyncio task round trip", bare_samples)
        print(seam.line())
        print(bare.line())
        print(report_ratio("seam overhead per delegation", seam.median, bare.median))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=20000)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.iterations)))
