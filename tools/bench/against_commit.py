"""This tree against an earlier commit built beside it, in the same run (issue 23).

Checks out ``--commit`` (default 1b60656, the last figures before the provider kit)
into ``.bench/commit-<sha>`` with its own environment (``uv sync --frozen`` of that
commit's lock), then alternates the two trees over ``--rounds`` rounds, each
measurement in a fresh process of its tree's interpreter (tools/bench/_against_worker.py,
which imports the tree's own ``bench_delegation.measure`` and ``bench_fanout.worker``):

* delegation overhead: median(parent turn with a ``spawn`` delegation) -
  median(the same turn with a constant tool), in-memory sessions;
* parent-only turn: median(the turn with the constant tool);
* the asyncio floor of the same process: median(await a child coroutine run as its
  own task) - median(await it directly), the least any delegation can cost;
* memory: peak RSS growth per concurrent delegation, 1,000 spawn children alive at once.

Prints the medians over rounds for both trees, the ratio of each tree to its floor and
this tree's ratio to the commit's, and writes them as JSON with ``--json``.

    uv run python tools/bench/against_commit.py [--commit 1b60656] [--rounds 5] [--iterations 2000]

``--python-this PATH`` / ``--python-commit PATH`` run a tree's workers with another
interpreter (default: the tree's own ``.venv/bin/python``), for instance an environment
made with ``UV_PROJECT_ENVIRONMENT=/tmp/venv312 uv sync --frozen --python 3.12`` in that
tree, to compare both trees on another Python version.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _bench import write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORKER = HERE / "_against_worker.py"


def checkout(commit: str) -> Path:
    """The commit's tree with its environment synced (made once, reused after)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{commit}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree = ROOT / ".bench" / f"commit-{sha[:12]}"
    if not (tree / ".git").exists():
        tree.parent.mkdir(exist_ok=True)
        subprocess.run(
            ["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(tree)], check=True
        )
        subprocess.run(["git", "checkout", "--quiet", "--detach", sha], cwd=tree, check=True)
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
    }
    subprocess.run(["uv", "sync", "--frozen", "--quiet"], cwd=tree, env=env, check=True)
    return tree


def measure(tree: Path, python: Path, iterations: int, alive: int) -> dict[str, float]:
    """One fresh-process measurement of ``tree`` (``python``, the tree's bench modules)."""
    figures: dict[str, float] = {}
    for mode, count in (("timing", iterations), ("memory", alive)):
        out = subprocess.run(
            [str(python), str(WORKER), str(tree / "tools" / "bench"), mode, str(count)],
            cwd=tree,
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise SystemExit(f"the {mode} worker failed in {tree}:\n{out.stderr[-4000:]}")
        figures.update(json.loads(out.stdout.strip().splitlines()[-1]))
    return figures


def main(
    commit: str,
    rounds: int,
    iterations: int,
    alive: int,
    json_path: str | None,
    pythons: tuple[str | None, str | None] = (None, None),
) -> int:
    base = checkout(commit)
    trees = {"this tree": ROOT, f"commit {commit}": base}
    interpreters = {
        name: Path(chosen) if chosen else tree / ".venv" / "bin" / "python"
        for (name, tree), chosen in zip(trees.items(), pythons, strict=True)
    }
    versions = {
        name: subprocess.run(
            [str(python), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for name, python in interpreters.items()
    }
    for name, python in interpreters.items():
        print(f"  {name:>16}: {python} (Python {versions[name]})")
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for index in range(rounds):
        order = list(trees.items()) if index % 2 == 0 else list(reversed(trees.items()))
        for name, tree in order:  # alternate, so drift on a shared machine hits both
            figures = measure(tree, interpreters[name], iterations, alive)
            samples[name].append(figures)
            print(
                f"  round {index + 1} {name:>16}: overhead {figures['overhead_us']:6.1f} µs,"
                f" parent-only turn {figures['parent_turn_us']:6.1f} µs,"
                f" floor {figures['floor_us']:5.2f} µs,"
                f" {figures['kib_per_delegation']:5.1f} KiB per delegation",
                flush=True,
            )
    keys = ("overhead_us", "parent_turn_us", "floor_us", "kib_per_delegation")
    summary: dict[str, Any] = {
        name: {key: statistics.median(s[key] for s in rows) for key in keys}
        for name, rows in samples.items()
    }
    print(f"\nmedians of {rounds} rounds, {iterations} turns each, {alive:,} children alive:")
    for name, figures in summary.items():
        ratio = figures["overhead_us"] / figures["floor_us"]
        figures["overhead_to_floor"] = ratio
        print(
            f"  {name:>16}: delegation overhead {figures['overhead_us']:6.1f} µs"
            f" ({ratio:4.1f}x the asyncio floor of {figures['floor_us']:.2f} µs),"
            f" parent-only turn {figures['parent_turn_us']:6.1f} µs,"
            f" {figures['kib_per_delegation']:.1f} KiB per concurrent delegation"
        )
    ours, theirs = summary["this tree"], summary[f"commit {commit}"]
    for key, label in (("overhead_us", "delegation overhead"), ("parent_turn_us", "parent turn")):
        print(f"  this tree / commit {commit}, {label}: {ours[key] / theirs[key]:.2f}x")
    if json_path:
        write_json(
            json_path,
            "tools/bench/against_commit.py",
            {"commit": commit, "python": versions, **summary},
        )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commit", default="1b60656")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--alive", type=int, default=1000, help="children alive at once")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    parser.add_argument(
        "--python-this", metavar="PATH", help="interpreter for this tree (default: its .venv)"
    )
    parser.add_argument(
        "--python-commit", metavar="PATH", help="interpreter for the commit (default: its .venv)"
    )
    args = parser.parse_args()
    sys.exit(
        main(
            args.commit,
            args.rounds,
            args.iterations,
            args.alive,
            args.json,
            (args.python_this, args.python_commit),
        )
    )
