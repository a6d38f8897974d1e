"""What recording a tape costs on the delegation overhead benchmark (issue 24).

The turns of ``bench_delegation.py`` — a parent turn whose tool is a real ``spawn``
delegation to a child with an instant scripted model, and the same turn with a
constant tool — with JSONL sessions, in a context opened plain or with
``Context.open(record=DIR)`` (its agents' tool calls go on the tape in process; the
scripted models make no HTTP call).

Each measurement runs in a fresh process (``--worker plain|taped``), plain and taped
alternating over ``--rounds`` rounds, so both see the same machine and neither
inherits the other's heap, files or threads (two contexts in one process did not
compare like with like: the first one opened ran its delegations up to 1.7x slower).
Prints the medians over rounds and the ratio recorded / plain (issue 24's target for
the delegating turn: ≤ 1.10x).

    uv run python tools/bench/bench_tape_delegation.py [--iterations N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile

from _bench import measure_async, write_json
from bench_delegation import PRESET, measured_parents

from dsh.core import Context
from dsh.tape import read_tape

KINDS = ("delegation", "constant")


async def worker(variant: str, iterations: int) -> dict[str, float]:
    """One variant's median turn times in seconds, by kind (this process only)."""
    with tempfile.TemporaryDirectory() as tmp:
        record = os.path.join(tmp, "tape") if variant == "taped" else None
        async with Context.open(
            PRESET, sessions_dir=os.path.join(tmp, "sessions"), record=record
        ) as ctx:
            parents = await measured_parents(ctx, "subagent", "constant")
            agents = {"delegation": parents["subagent"], "constant": parents["constant"]}
            medians: dict[str, list[float]] = {kind: [] for kind in KINDS}
            for _ in range(5):  # interleave the two kinds so drift hits both
                for kind, agent in agents.items():
                    timing = await measure_async(
                        kind, lambda a=agent: a.run("go"), iterations=iterations // 5, warmup=20
                    )
                    medians[kind].append(timing.median)
        if record is not None and not read_tape(record).tools:
            raise SystemExit("the taped context recorded no tool call")
    return {kind: statistics.median(values) for kind, values in medians.items()}


def run_worker(variant: str, iterations: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", variant, "--iterations", str(iterations)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(iterations: int, rounds: int, json_path: str | None) -> int:
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "taped": []}
    for round_ in range(rounds):
        order = ("plain", "taped") if round_ % 2 == 0 else ("taped", "plain")
        for variant in order:
            runs[variant].append(run_worker(variant, iterations))
        plain, taped = runs["plain"][-1], runs["taped"][-1]
        print(
            f"  round {round_ + 1}: delegating turn {plain['delegation'] * 1e6:6.1f} µs plain,"
            f" {taped['delegation'] * 1e6:6.1f} µs recorded"
            f" ({taped['delegation'] / plain['delegation']:.3f}x); constant-tool turn"
            f" {plain['constant'] * 1e6:5.1f} / {taped['constant'] * 1e6:5.1f} µs"
        )
    print(f"load after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results: dict[str, dict[str, float]] = {}
    for kind, what in (
        ("delegation", "turn with a spawn delegation"),
        ("constant", "turn with a constant tool"),
    ):
        plain_median = statistics.median(r[kind] for r in runs["plain"])
        taped_median = statistics.median(r[kind] for r in runs["taped"])
        ratio = taped_median / plain_median
        target = " (target ≤ 1.10x)" if kind == "delegation" else ""
        print(
            f"{what}, JSONL sessions, medians of {rounds} rounds: recorded"
            f" {taped_median * 1e6:.1f} µs vs {plain_median * 1e6:.1f} µs plain"
            f" = {ratio:.3f}x{target}"
        )
        results[kind] = {
            "plain_us": plain_median * 1e6,
            "recorded_us": taped_median * 1e6,
            "ratio": ratio,
        }
    if json_path:
        write_json(json_path, "tools/bench/bench_tape_delegation.py", results)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000, help="turns per kind and run")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    parser.add_argument("--worker", choices=("plain", "taped"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(asyncio.run(worker(args.worker, args.iterations))))
        sys.exit(0)
    sys.exit(main(args.iterations, args.rounds, args.json))
