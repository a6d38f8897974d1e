"""Cold start of a ``dsh acp`` child through the acp provider (issue 5).

One sample = a fresh ``python -m dsh.cli acp --preset P`` process spawned by the
acp provider, from ``start`` to the settled result (spawn, interpreter start,
imports, ``initialize``, ``session/new``, one prompt on a scripted model).
Baseline, measured in the same run and interleaved with it: a fresh
``python -c "import acp"`` process from spawn to exit — the floor for any
Python ACP agent. Both get the same environment (the provider's scrubbed one)
and one unmeasured warm-up each (so both read bytecode caches). The parent is
warm (``acp`` already imported). Target: ratio ≤ 1.5.

    uv run python tools/bench/bench_acp_cold_start.py [--repetitions N] [--importtime]

``--importtime`` also prints where the child's start time goes: the top entries
of ``python -X importtime -m dsh.cli acp`` (cumulative, top-level packages).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_acp import AcpProvider, AcpProviderConfig
from dsh.subprocess import scrubbed_env

CHILD_PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
text = "pong: {prompt}"
"""


async def floor_once(env: dict[str, str]) -> float:
    """Spawn → exit of ``python -c "import acp"``."""
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import acp", env=env, stdin=asyncio.subprocess.DEVNULL
    )
    code = await process.wait()
    elapsed = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"python -c 'import acp' failed with exit status {code}")
    return elapsed


async def imported_once(env: dict[str, str]) -> float:
    """Spawn → "imported" on stdout of ``python -c "import acp; print(...)"`` (no teardown)."""
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import acp; print('imported', flush=True)",
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    line = await process.stdout.readline()
    elapsed = time.perf_counter() - started
    await process.wait()
    if line.strip() != b"imported":
        raise SystemExit(f"python -c 'import acp' failed (exit status {process.returncode})")
    return elapsed


async def main(repetitions: int, importtime: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="dsh-bench-acp-") as folder:
        preset = Path(folder) / "child.toml"
        preset.write_text(CHILD_PRESET, encoding="utf-8")
        config = AcpProviderConfig(
            command=sys.executable, args=["-m", "dsh.cli", "acp", "--preset", str(preset)]
        )
        env = scrubbed_env(config.env)
        parent_preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
        async with Context.open(parent_preset, cwd=folder) as ctx:
            runtime = SubagentRuntime.of(ctx)
            runtime.register_provider(AcpProvider(config))
            parent = ctx.agents.create()

            async def child_once() -> tuple[float, float]:
                request = SubagentStartRequest("ping", parent, AbortSignal())
                started = time.perf_counter()
                run = await runtime.start("acp", request)
                result = await run.result
                elapsed = time.perf_counter() - started
                disposing = time.perf_counter()
                await run.dispose()
                if (result.stop_reason, result.output) != ("completed", "pong: ping"):
                    raise SystemExit(f"unexpected result {result}")
                return elapsed, time.perf_counter() - disposing

            await child_once()  # warm-up: imports acp in the parent, bytecode caches
            await floor_once(env)
            child: list[float] = []
            dispose: list[float] = []
            floor: list[float] = []
            imported: list[float] = []
            for _ in range(repetitions):
                floor.append(await floor_once(env))
                imported.append(await imported_once(env))
                elapsed, disposed = await child_once()
                child.append(elapsed)
                dispose.append(disposed)

    def line(name: str, samples: list[float]) -> str:
        return (
            f"{name:<52} median {statistics.median(samples):6.3f} s"
            f"   min {min(samples):6.3f}   max {max(samples):6.3f}   (n={len(samples)})"
        )

    print(line('floor: python -c "import acp" (spawn → exit)', floor))
    print(line('stricter: python -c "import acp" (spawn → imported)', imported))
    print(line("dsh acp child: spawn → settled result", child))
    print(line("dsh acp child: dispose (stdin EOF → reaped)", dispose))
    ratio = statistics.median(child) / statistics.median(floor)
    verdict = "meets" if ratio <= 1.5 else "MISSES"
    print(f"cold start ratio: {ratio:.2f}x the floor ({verdict} the 1.5x target)")
    strict = statistics.median(child) / statistics.median(imported)
    print(f"against the stricter floor (no interpreter teardown): {strict:.2f}x")
    if importtime:
        await print_importtime()
    return 0


async def print_importtime(top: int = 12) -> None:
    """Run ``python -X importtime -m dsh.cli acp`` once (stdin closed at once) and
    print the slowest top-level imports (cumulative)."""
    with tempfile.TemporaryDirectory(prefix="dsh-bench-acp-") as folder:
        preset = Path(folder) / "child.toml"
        preset.write_text(CHILD_PRESET, encoding="utf-8")
        env = scrubbed_env()
        started = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "dsh.cli",
            "acp",
            "--preset",
            str(preset),
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await process.communicate(b"")
        total = time.perf_counter() - started
    rows: list[tuple[int, int, str]] = []
    for raw in err.decode(errors="replace").splitlines():
        parts = raw.removeprefix("import time:").split("|")
        if not raw.startswith("import time:") or len(parts) != 3:
            continue
        try:
            self_us, cumulative_us = int(parts[0]), int(parts[1])
        except ValueError:
            continue  # the header line
        name = parts[2]
        if len(name) - len(name.lstrip(" ")) == 1:  # top level: imported by dsh itself
            rows.append((cumulative_us, self_us, name.strip()))
    rows.sort(reverse=True)
    print(f"\npython -X importtime -m dsh.cli acp (start, then stdin EOF): {total:.3f} s wall")
    print(f"{'cumulative':>12} {'self':>10}  top-level import")
    for cumulative_us, self_us, name in rows[:top]:
        print(f"{cumulative_us / 1e6:10.3f} s {self_us / 1e6:8.3f} s  {name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--importtime", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(asyncio.run(main(args.repetitions, args.importtime)))
