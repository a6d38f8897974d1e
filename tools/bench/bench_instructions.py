"""Instructions per parent turn under valgrind's callgrind: a count that does not
move with the machine's load, for changes of a few percent that timing cannot
resolve on a noisy machine (issues 23 and 25).

Each variant runs in two fresh processes under ``valgrind --tool=callgrind`` (with
``PYTHONHASHSEED=0``), one making ``--turns`` parent turns more than the other after
the same warm-up; the difference over those turns is the count per turn, start-up and
imports cancelling out. Variants (the parents of ``bench_budget.py``): ``constant`` (a
tool returning a constant), ``plain`` (a spawn delegation), ``budgeted`` (the same with
the tool row's budget). Delegation overhead = plain - constant; a budget's cost =
budgeted - plain. Repeated runs agree within about 1,000 instructions (addresses still
vary: id-keyed caches, garbage collection order).

    uv run python tools/bench/bench_instructions.py [--turns N] [VARIANT ...]

Needs valgrind (``apt-get install valgrind``); about 30 s per variant.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import subprocess
import sys

VARIANTS = ("constant", "plain", "budgeted")
_WARMUP = 200


async def _turns(variant: str, turns: int) -> None:
    from bench_budget import PRESET
    from bench_delegation import measured_parents

    from dsh.core import Context

    tool = {"plain": "subagent", "budgeted": "subagent_budgeted"}.get(variant, variant)
    async with Context.open(PRESET) as ctx:
        parent = (await measured_parents(ctx, tool))[tool]
        for _ in range(_WARMUP):
            await parent.run("go")
        gc.collect()
        for _ in range(turns):
            await parent.run("go")


def _count(variant: str, turns: int) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0")
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
    done = subprocess.run(
        [*argv, __file__, "--child", variant, str(turns)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=400, help="turns counted (default 400)")
    parser.add_argument("variants", nargs="*", metavar="VARIANT", help=", ".join(VARIANTS))
    args = parser.parse_args()
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}: use {', '.join(VARIANTS)}")
    args.variants = args.variants or list(VARIANTS)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    per_turn: dict[str, int] = {}
    for variant in args.variants:
        low, high = _count(variant, 100), _count(variant, 100 + args.turns)
        per_turn[variant] = (high - low) // args.turns
        print(f"{variant:<9} {per_turn[variant]:>9,} instructions per parent turn", flush=True)
    if "plain" in per_turn and "constant" in per_turn:
        overhead = per_turn["plain"] - per_turn["constant"]
        print(f"delegation overhead: {overhead:,} instructions")
        if "budgeted" in per_turn:
            cost = per_turn["budgeted"] - per_turn["plain"]
            print(f"a budget's cost: {cost:,} instructions ({1 + cost / overhead:.3f}x)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(_turns(sys.argv[2], int(sys.argv[3])))
        sys.exit(0)
    sys.exit(main())
