"""What a budget costs a delegation (issue 25): the same spawn delegation with and
without a budget, in the same run.

Three parent turns, interleaved turn by turn (the order rotating) so that drift
hits all alike: one calls the
``subagent`` tool (no budget), one calls ``subagent_budgeted`` (the same provider,
with a tool-row budget on every child: tokens, seconds, children and turns, none of
them reached), one calls a tool that returns a constant. Overhead per delegation =
median(turn) - median(constant-tool turn); the budget's cost = the budgeted overhead
over the plain one (issue 25's target: at most 1.05x).

    uv run python tools/bench/bench_budget.py [--iterations N] [--rounds R] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys

from _bench import measure_interleaved, write_json
from bench_delegation import measured_parents

from dsh.core import Context, parse_preset

_ROW = """
[[plugin]]
name = "dsh-tool-subagent"
config.provider = "spawn"
config.tool_name = "{name}"
config.max_depth = 3
config.agent_options.model.adapter = "scripted"
config.agent_options.model.options.replies = [{{ text = "child answer" }}]
"""
PRESET = parse_preset(
    '[agent.model]\nadapter = "scripted"\n[[plugin]]\nname = "dsh-subagent-spawn-in-process"\n'
    + _ROW.format(name="subagent")
    + _ROW.format(name="subagent_budgeted")
    + "config.budget = { tokens = 100000000, seconds = 86400, children = 1000000000,"
    " turns = 1000000000 }\n"
)


async def measure(iterations: int, rounds: int) -> dict[str, list[float]]:
    """Per round: the three turns' medians in seconds (``plain``, ``budgeted``, ``constant``)."""
    async with Context.open(PRESET) as ctx:
        parents = await measured_parents(ctx, "subagent", "subagent_budgeted", "constant")
        agents = {
            "plain": parents["subagent"],
            "budgeted": parents["subagent_budgeted"],
            "constant": parents["constant"],
        }
        medians: dict[str, list[float]] = {name: [] for name in agents}
        fns = {name: (lambda agent=agent: agent.run("go")) for name, agent in agents.items()}
        for _ in range(rounds):
            timings = await measure_interleaved(fns, iterations=iterations)
            for name, timing in timings.items():
                medians[name].append(timing.median)
        return medians


async def main(iterations: int, rounds: int, json_path: str | None) -> int:
    medians = await measure(iterations, rounds)
    plain = [p - c for p, c in zip(medians["plain"], medians["constant"], strict=True)]
    budgeted = [b - c for b, c in zip(medians["budgeted"], medians["constant"], strict=True)]
    ratios = [b / p for b, p in zip(budgeted, plain, strict=True)]
    for i, (p, b, r) in enumerate(zip(plain, budgeted, ratios, strict=True), 1):
        print(f"  round {i}: overhead {p * 1e6:6.1f} µs plain, {b * 1e6:6.1f} µs budgeted", end="")
        print(f" ({r:.3f}x)")
    ratio = statistics.median(ratios)
    print(
        f"\nmedians of {rounds} rounds, {iterations} turns each:\n"
        f"  delegation overhead without a budget: {statistics.median(plain) * 1e6:.1f} µs\n"
        f"  delegation overhead with a budget:    {statistics.median(budgeted) * 1e6:.1f} µs\n"
        f"  with / without: {ratio:.3f}x (target <= 1.05x)"
    )
    if json_path:
        write_json(
            json_path,
            "tools/bench/bench_budget.py",
            {
                "plain_overhead_us": [p * 1e6 for p in plain],
                "budgeted_overhead_us": [b * 1e6 for b in budgeted],
                "ratio_median": ratio,
            },
        )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.iterations, args.rounds, args.json)))
