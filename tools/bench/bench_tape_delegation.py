"""What recording a tape costs on the delegation overhead benchmark (issue 24).

The turns of ``bench_delegation.py`` — a parent turn whose tool is a real ``spawn``
delegation to a child with an instant scripted model, and the same turn with a
constant tool — in two contexts open side by side, both with JSONL sessions: one
plain, one opened with ``Context.open(record=DIR)`` (its agents' tool calls go on the
tape in process; the scripted models make no HTTP call). Rounds alternate between
the two so a busy machine slows both alike; the ratio recorded / plain of the
medians is printed (issue 24's target: ≤ 1.10x).

    uv run python tools/bench/bench_tape_delegation.py [--iterations N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from contextlib import AsyncExitStack

from _bench import Timing, measure_async, write_json
from bench_delegation import PRESET, Args, parent_model

from dsh.core import Agent, Context, Tool, ToolContext
from dsh.tape import read_tape


async def _agents(ctx: Context) -> tuple[Agent, Agent]:
    async def constant(args: Args, tctx: ToolContext) -> str:
        return "child answer"

    ctx.tools.register(Tool.from_model("constant", "constant", Args, constant))
    delegating = ctx.agents.create(model=parent_model("subagent"), persist=False)
    baseline = ctx.agents.create(model=parent_model("constant"), persist=False)
    for agent in (delegating, baseline):  # a benchmark of a failing call proves nothing
        await agent.run("go")
        (result,) = [e.data for e in agent.session.events if e.type == "tool/result"]
        if result["is_error"] or result["content"][0]["text"] != "child answer":
            raise SystemExit(f"the measured tool call does not work: {result}")
    return delegating, baseline


async def main(iterations: int, rounds: int, json_path: str | None) -> int:
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncExitStack() as stack:
            plain_ctx = await stack.enter_async_context(
                Context.open(PRESET, sessions_dir=os.path.join(tmp, "plain"))
            )  # opened first: the recording context's DSH_TAPE_PROXY is not set yet
            taped_ctx = await stack.enter_async_context(
                Context.open(
                    PRESET, sessions_dir=os.path.join(tmp, "taped"), record=os.path.join(tmp, "t")
                )
            )
            assert plain_ctx.tool_tape is None
            assert taped_ctx.tool_tape is not None
            plain = await _agents(plain_ctx)
            taped = await _agents(taped_ctx)
            per_round = max(iterations // rounds, 1)
            for _ in range(rounds):  # interleave so drift hits both
                for name, (delegating, baseline) in (("plain", plain), ("taped", taped)):
                    for kind, agent in (("delegation", delegating), ("constant", baseline)):
                        timing = await measure_async(
                            kind, lambda a=agent: a.run("go"), iterations=per_round, warmup=20
                        )
                        samples.setdefault(f"{name} {kind}", []).extend(timing.samples)
        tape = read_tape(os.path.join(tmp, "t"))
    print(f"load after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"tape: {len(tape.tools)} tool calls recorded\n")
    timings = {key: Timing(key, values) for key, values in samples.items()}
    for timing in timings.values():
        print(timing.line())
    results = {}
    for kind, what in (
        ("delegation", "turn with a spawn delegation"),
        ("constant", "turn with a constant tool"),
    ):
        plain_median = timings[f"plain {kind}"].median
        taped_median = timings[f"taped {kind}"].median
        ratio = taped_median / plain_median
        low = timings[f"taped {kind}"].p(0.1) / timings[f"plain {kind}"].p(0.1)
        target = " (target ≤ 1.10x)" if kind == "delegation" else ""
        print(
            f"{what}, JSONL sessions: recorded {taped_median * 1e6:.1f} µs vs"
            f" {plain_median * 1e6:.1f} µs plain = {ratio:.3f}x{target}; p10 ratio {low:.3f}x"
        )
        results[kind] = {
            "p10_ratio": low,
            "plain_us": plain_median * 1e6,
            "recorded_us": taped_median * 1e6,
            "ratio": ratio,
        }
    if json_path:
        write_json(json_path, "tools/bench/bench_tape_delegation.py", results)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000, help="turns per variant")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.iterations, args.rounds, args.json)))
