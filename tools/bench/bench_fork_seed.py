"""Fork seeding cost against parent size (issue 4).

Times ``fork`` provider ``start`` (child creation seeded with the parent's
completed-turn prefix, run published, first turn queued) for parents of 10, 1k
and 100k events, in-memory and with JSONL persistence. The 10-event fork is the
baseline measured in the same run. Targets: 100k-event fork ≤ 5 ms and ≤ 2x the
10-event fork (the seed is shared by reference, not copied event by event).

    uv run python tools/bench/bench_fork_seed.py [--repetitions N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time

from dsh.core import AbortSignal, Agent, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest

PRESET = parse_preset(
    '[agent.model]\nadapter = "scripted"\n[[plugin]]\nname = "dsh-subagent-fork-in-process"\n'
)
SIZES = (10, 1_000, 100_000)


def grow(parent: Agent, events: int) -> None:
    """Give ``parent`` ``events`` events of completed turns (4 events per turn)."""
    session = parent.session
    turn = 0
    while len(session) + 4 <= events:
        turn += 1
        session.append("user/message", {"content": [{"type": "text", "text": f"question {turn}"}]})
        session.append("turn/start", {"turn": turn})
        session.append(
            "assistant/message",
            {"content": [{"type": "text", "text": f"answer {turn}"}], "stop_reason": "end"},
        )
        session.append("turn/end", {"turn": turn, "stop_reason": "completed"})
    while len(session) < events:
        session.append("user/message", {"content": [{"type": "text", "text": "in flight"}]})


async def fork_once(ctx: Context, parent: Agent) -> float:
    request = SubagentStartRequest("what do you know?", parent, AbortSignal())
    started = time.perf_counter()
    run = await SubagentRuntime.of(ctx).start("fork", request)
    elapsed = time.perf_counter() - started
    assert run.local_agent is not None
    seed = run.local_agent.session.header.meta["seed_length"]
    assert seed == len(parent.session.completed_prefix()), "fork did not seed"
    result = await run.result
    assert result.stop_reason == "completed", result
    await run.dispose()
    return elapsed


async def main(repetitions: int) -> int:
    for label, persist in (("in-memory sessions", False), ("JSONL persistence", True)):
        with tempfile.TemporaryDirectory() as tmp:
            async with Context.open(PRESET, sessions_dir=tmp if persist else None) as ctx:
                parents = {}
                for size in SIZES:
                    parent = ctx.agents.create()
                    grow(parent, size)
                    parents[size] = parent
                samples: dict[int, list[float]] = {size: [] for size in SIZES}
                for round_ in range(repetitions + 5):  # sizes interleaved: drift hits all
                    for size in SIZES:
                        elapsed = await fork_once(ctx, parents[size])
                        if round_ >= 5:  # the first rounds warm up
                            samples[size].append(elapsed)
                medians = {size: statistics.median(samples[size]) for size in SIZES}
        print(f"[{label}]")
        base = medians[SIZES[0]]
        for size in SIZES:
            print(
                f"  fork of a {size:>7,}-event parent: median {medians[size] * 1e3:7.3f} ms"
                f"  = {medians[size] / base:5.2f}x the 10-event fork"
            )
        big = medians[SIZES[-1]]
        verdict = "meets" if big <= 0.005 and big <= 2 * base else "MISSES"
        print(f"  100k-event fork {verdict} the target (≤ 5 ms and ≤ 2x the 10-event fork)\n")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=200)
    sys.exit(asyncio.run(main(parser.parse_args().repetitions)))
