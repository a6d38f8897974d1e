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

    uv run python tools/bench/bench_instructions.py [--turns N] [--against DIR] [VARIANT ...]

Garbage collection is off while the counted turns run, as in the timing benchmarks.
With ``--against DIR`` another checkout (its own ``.venv``, as ``against_commit.py``
builds under ``.bench/``) is counted the same way and the ratios printed (issue 23).

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
from collections.abc import Callable
from pathlib import Path

VARIANTS = ("constant", "plain", "budgeted")
_HERE_TREE = Path(__file__).resolve().parents[2]
_WARMUP = 200


async def _turns(
    bench_dir: str, variant: str, turns: int, trace: Callable[[], None] | None = None
) -> None:
    """Warm up, then run ``turns`` parent turns of ``variant`` with GC off (``trace``
    is called just before them: a tracer is installed there)."""
    sys.path.insert(0, bench_dir)
    import bench_delegation  # type: ignore[import-not-found]

    from dsh.core import Context, Tool, ToolContext

    if variant == "budgeted":
        from bench_budget import PRESET  # type: ignore[import-not-found]
    else:  # (what bench_delegation offers in every tree, 1b60656 on)
        PRESET = bench_delegation.PRESET

    async def constant(args: object, tctx: ToolContext) -> str:
        return "child answer"

    tool = {"plain": "subagent", "budgeted": "subagent_budgeted"}.get(variant, variant)
    async with Context.open(PRESET) as ctx:
        ctx.tools.register(Tool.from_model("constant", "constant", bench_delegation.Args, constant))
        model = bench_delegation.parent_model(tool)
        parent = ctx.agents.create(model=model, persist=False)
        for _ in range(_WARMUP):
            await parent.run("go")
        gc.collect()
        gc.disable()  # (as the timing benchmarks do while they time)
        if trace is not None:
            trace()
        for _ in range(turns):
            await parent.run("go")


def _count(tree: Path, variant: str, turns: int) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0")
    python = str(tree / ".venv" / "bin" / "python") if tree != _HERE_TREE else sys.executable
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, __file__]
    done = subprocess.run(
        [*argv, "--child", str(tree / "tools" / "bench"), variant, str(turns)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def _per_turn(tree: Path, variants: list[str], turns: int) -> dict[str, int]:
    per_turn: dict[str, int] = {}
    for variant in variants:
        low, high = _count(tree, variant, 100), _count(tree, variant, 100 + turns)
        per_turn[variant] = (high - low) // turns
        print(f"{variant:<9} {per_turn[variant]:>9,} instructions per parent turn", flush=True)
    if "plain" in per_turn and "constant" in per_turn:
        overhead = per_turn["plain"] - per_turn["constant"]
        print(f"delegation overhead: {overhead:,} instructions")
        if "budgeted" in per_turn:
            cost = per_turn["budgeted"] - per_turn["plain"]
            print(f"a budget's cost: {cost:,} instructions ({1 + cost / overhead:.3f}x)")
    return per_turn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=400, help="turns counted (default 400)")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="also count another checkout with its own .venv (e.g. .bench/commit-1b6065697aa5"
        " from against_commit.py): constant and plain only",
    )
    parser.add_argument("variants", nargs="*", metavar="VARIANT", help=", ".join(VARIANTS))
    args = parser.parse_args()
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}: use {', '.join(VARIANTS)}")
    args.variants = args.variants or list(VARIANTS)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    print(f"this tree ({_HERE_TREE}):")
    this = _per_turn(_HERE_TREE, args.variants, args.turns)
    if args.against is not None:
        other_variants = [v for v in args.variants if v != "budgeted"]
        print(f"\n{args.against}:")
        other = _per_turn(args.against.resolve(), other_variants, args.turns)
        if {"plain", "constant"} <= set(this) & set(other):
            mine = this["plain"] - this["constant"]
            theirs = other["plain"] - other["constant"]
            print(
                f"\nthis tree / {args.against.name}: delegation overhead {mine / theirs:.3f}x,"
                f" parent-only turn {this['constant'] / other['constant']:.3f}x"
            )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(_turns(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        sys.exit(0)
    sys.exit(main())
