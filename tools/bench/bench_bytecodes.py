"""Python bytecodes executed per delegation, by function: where a delegation's Python
work goes, and what changed against another checkout (issue 23).

A delegation's wall time on this machine follows the bytecodes it runs more than its
machine instructions (each bytecode is an indirect jump of the interpreter's loop):
at 2026-12-04 this tree ran fewer instructions per delegation than 1b60656 (0.99x,
``bench_instructions.py``) but 18 % more bytecodes, and was 5-9 % slower on the clock.

Each variant (``constant``, ``plain``: the parents of ``bench_instructions.py``) runs
in a fresh process with a ``sys.settrace`` tracer counting opcode events per code
object over ``--turns`` turns (garbage collection off); the delegation = plain -
constant. Exact and repeatable (a traced turn is slow: ~100 turns take seconds), but
the tracer sees only frames started after it was installed.

    uv run python tools/bench/bench_bytecodes.py [--turns N] [--top K] [--against DIR]
    uv run python tools/bench/bench_bytecodes.py --budget   # what a budget adds
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from bench_instructions import _HERE_TREE, _turns

_ALL = Path(__file__).resolve()


def _child(bench_dir: str, variant: str, turns: int, out: str) -> None:
    counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            code = frame.f_code
            counts[(code.co_filename, code.co_qualname)] += 1
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return local

    asyncio.run(_turns(bench_dir, variant, turns, lambda: sys.settrace(tracer)))
    sys.settrace(None)
    rows = {f"{_short(name)}:{qualname}": n / turns for (name, qualname), n in counts.items()}
    Path(out).write_text(json.dumps(rows))


def _short(filename: str) -> str:
    """``dsh/core/turn.py`` for ``.../src/dsh/core/_turn.py`` (old trees' public module
    names and new private ones compare), ``asyncio/tasks.py`` for the stdlib's."""
    for marker in ("/src/", "site-packages/", "/lib/python3"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    filename = re.sub(r"^\.\d+/", "", filename)
    return re.sub(r"/_([a-z][a-z0-9_]*\.py)$", r"/\1", filename)


def _delegation(
    tree: Path, turns: int, scratch: Path, variants: tuple[str, str] = ("plain", "constant")
) -> dict[str, float]:
    """Bytecodes per turn of ``variants[0]`` minus those of ``variants[1]``, by function."""
    per: dict[str, dict[str, float]] = {}
    for variant in variants:
        out = scratch / f"{tree.name}.{variant}.json"
        python = str(tree / ".venv" / "bin" / "python") if tree != _HERE_TREE else sys.executable
        argv = [python, str(_ALL), "--child", str(tree / "tools" / "bench"), variant]
        subprocess.run([*argv, str(turns), str(out)], cwd=tree, check=True)
        per[variant] = json.loads(out.read_text())
    more, less = per[variants[0]], per[variants[1]]
    return {k: more.get(k, 0.0) - less.get(k, 0.0) for k in more.keys() | less.keys()}


def _by_file(rows: dict[str, float]) -> collections.Counter[str]:
    files: collections.Counter[str] = collections.Counter()
    for key, n in rows.items():
        files[key.rsplit(":", 1)[0]] += n
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100, help="turns traced (default 100)")
    parser.add_argument("--top", type=int, default=25, help="rows shown (default 25)")
    parser.add_argument(
        "--against", type=Path, metavar="DIR", help="another checkout with its own .venv"
    )
    parser.add_argument(
        "--budget",
        action="store_true",
        help="what a tool-row budget adds to a delegation (bench_budget.py's budget)",
    )
    args = parser.parse_args()
    import tempfile

    if args.budget:
        with tempfile.TemporaryDirectory() as scratch:
            added = _delegation(_HERE_TREE, args.turns, Path(scratch), ("budgeted", "plain"))
        print(f"a budget adds {sum(added.values()):,.0f} bytecodes per delegation")
        for key, n in sorted(added.items(), key=lambda kv: -abs(kv[1]))[: args.top]:
            if abs(n) >= 0.5:
                print(f"{n:8.0f}  {key}")
        return 0

    with tempfile.TemporaryDirectory() as scratch:
        this = _delegation(_HERE_TREE, args.turns, Path(scratch))
        other = (
            _delegation(args.against.resolve(), args.turns, Path(scratch))
            if args.against is not None
            else None
        )
    print(f"this tree: {sum(this.values()):,.0f} bytecodes per delegation")
    if other is None:
        for key, n in sorted(this.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"{n:8.0f}  {key}")
        return 0
    print(f"{args.against}: {sum(other.values()):,.0f} bytecodes per delegation")
    mine, theirs = _by_file(this), _by_file(other)
    print(f"\n{'this':>8} {'other':>8} {'change':>8}  file")
    changed = sorted(mine.keys() | theirs.keys(), key=lambda f: -abs(mine[f] - theirs[f]))
    for name in changed[: args.top]:
        print(f"{mine[name]:8.0f} {theirs[name]:8.0f} {mine[name] - theirs[name]:+8.0f}  {name}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        bench_dir, variant, turns, out = sys.argv[2:6]
        sys.path.insert(0, bench_dir)
        _child(bench_dir, variant, int(turns), out)
        sys.exit(0)
    sys.exit(main())
