"""Delegation overhead of dsh and of its Python peers, measured in the same run.

For each framework, a parent agent's turn calls one tool and then answers: once with
the framework's way of delegating to a child agent, once with a tool that returns a
constant; every model is a fake that answers at once. Overhead per delegation =
median(turn with delegation) - median(turn with constant tool), as
tools/bench/bench_delegation.py measures it for dsh:

* dsh -- the ``subagent`` tool on the ``spawn`` provider (peer_dsh.py, which reuses
  bench_delegation.py);
* openai-agents -- ``Agent.as_tool`` (peer_openai_agents.py);
* pydantic-ai -- agent delegation through a tool (peer_pydantic_ai.py);
* Google ADK -- ``AgentTool`` (peer_adk.py).

Each worker runs in a process of its own; the frameworks take turns over ``--rounds``
rounds (the order rotated each round) so that drift on a shared machine hits all of
them alike, and the samples of all rounds are pooled. The peers are installed
(requirements.txt, pinned, with bytecode compiled) into .venvs/bench-peers, never into
the project's environment or lock; a peer that cannot be installed or run is reported
as unavailable, with the reason, and the others are still measured.

    uv run python tools/bench/peers/bench_peers.py [--iterations 1000] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))  # tools/bench: _bench

from _bench import write_json  # noqa: E402

VENV = Path(os.environ.get("DSH_BENCH_PEERS_ENV", ROOT / ".venvs" / "bench-peers"))
REQUIREMENTS = HERE / "requirements.txt"
# name, worker script, environment ("project" or "peers"), what delegation means there
FRAMEWORKS = [
    ("dsh", "peer_dsh.py", "project", "subagent tool, spawn provider"),
    ("openai-agents", "peer_openai_agents.py", "peers", "Agent.as_tool"),
    ("pydantic-ai", "peer_pydantic_ai.py", "peers", "agent delegation via a tool"),
    ("google-adk", "peer_adk.py", "peers", "AgentTool"),
]


def peers_python() -> tuple[Path | None, str]:
    """The peers' interpreter, installing .venvs/bench-peers when it is missing or its
    requirements changed; (None, why) when that fails."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".requirements-sha256"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python, ""
    uv = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    steps = [
        [uv, "venv", "--quiet", "--allow-existing", "--python", sys.executable, str(VENV)],
        [
            uv, "pip", "install", "--quiet", "--compile-bytecode",
            "--python", str(python), "-r", str(REQUIREMENTS),
        ],
    ]  # fmt: skip
    print(f"bench_peers: installing the peers into {VENV} ...", file=sys.stderr)
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{' '.join(step[:3])}: {exc}"
        if done.returncode != 0:
            return None, f"{' '.join(step[:3])} failed: {done.stderr.strip()[-500:]}"
    stamp.write_text(wanted)
    return python, ""


def run_worker(python: Path, script: str, iterations: int) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # let imports use (and write) bytecode
    done = subprocess.run(
        [str(python), str(HERE / script), str(iterations)],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-1500:] or f"exit status {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(iterations: int, rounds: int, only: list[str] | None, json_path: str | None) -> int:
    chosen = [f for f in FRAMEWORKS if only is None or f[0] in only]
    pythons: dict[str, tuple[Path | None, str]] = {"project": (Path(sys.executable), "")}
    if any(f[2] == "peers" for f in chosen):
        pythons["peers"] = peers_python()
    samples: dict[str, dict[str, list[float]]] = {}
    per_round: dict[str, list[float]] = {}
    versions: dict[str, str] = {}
    unavailable: dict[str, str] = {}
    for name, _, where, _ in chosen:
        if pythons[where][0] is None:
            unavailable[name] = pythons[where][1]
    started = time.perf_counter()
    for number in range(rounds):
        order = chosen[number % len(chosen) :] + chosen[: number % len(chosen)]
        for name, script, where, _ in order:
            python = pythons[where][0]
            if name in unavailable or python is None:
                continue
            try:
                figures = run_worker(python, script, iterations)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                unavailable[name] = str(exc)
                print(f"bench_peers: {name} could not run: {exc}", file=sys.stderr)
                continue
            versions[name] = figures["version"]
            pooled = samples.setdefault(name, {"delegating": [], "constant": []})
            pooled["delegating"] += figures["delegating"]
            pooled["constant"] += figures["constant"]
            per_round.setdefault(name, []).append(
                statistics.median(figures["delegating"]) - statistics.median(figures["constant"])
            )
            print(
                f"  round {number + 1}/{rounds} {name:<14}"
                f" overhead {per_round[name][-1] * 1e6:9.1f} µs",
                file=sys.stderr,
            )
    results: list[dict[str, Any]] = []
    print(
        f"\ndelegation overhead = median(turn with delegation) - median(turn with constant"
        f" tool); {iterations:,} turns of each per round, {rounds} rounds, pooled\n"
    )
    print(f"{'framework':<16}{'delegating':>12}{'constant':>12}{'overhead':>12}{'vs dsh':>9}")
    dsh_overhead = None
    for name, _, _, how in chosen:
        if name not in samples:
            continue
        delegating = statistics.median(samples[name]["delegating"])
        constant = statistics.median(samples[name]["constant"])
        overhead = delegating - constant
        dsh_overhead = overhead if name == "dsh" else dsh_overhead
        ratio = overhead / dsh_overhead if dsh_overhead else None
        print(
            f"{name:<16}{delegating * 1e6:10.1f}µs{constant * 1e6:10.1f}µs"
            f"{overhead * 1e6:10.1f}µs{'' if ratio is None else f'{ratio:8.1f}x'}"
        )
        results.append(
            {
                "framework": name,
                "version": versions[name],
                "delegation": how,
                "turn_with_delegation_us": delegating * 1e6,
                "turn_with_constant_tool_us": constant * 1e6,
                "overhead_us": overhead * 1e6,
                "overhead_per_round_us": [v * 1e6 for v in per_round[name]],
                "samples": len(samples[name]["delegating"]),
            }
        )
    for name, why in unavailable.items():
        print(f"{name:<16}unavailable: {why.splitlines()[-1] if why else '?'}")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if json_path:
        write_json(
            json_path,
            "tools/bench/peers/bench_peers.py",
            {
                "iterations_per_round": iterations,
                "rounds": rounds,
                "frameworks": results,
                "unavailable": unavailable,
            },
        )
    return 0 if "dsh" in samples or (only and "dsh" not in only) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=1000, help="turns of each variant")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", help="comma-separated frameworks: " + ", ".join(f[0] for f in FRAMEWORKS)
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    args = parser.parse_args()
    only = args.only.split(",") if args.only else None
    sys.exit(main(args.iterations, args.rounds, only, args.json))
