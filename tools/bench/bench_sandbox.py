"""The sandbox's cost per shell command (issue 20): the same command through the shell
tool's runner (``run_command``: a ``ChildProcess`` with a run tag, output captured, the
tree torn down), once unsandboxed and once inside bubblewrap (workspace-write, network
off, own PID namespace), in the same run and interleaved, so the difference is the
sandbox alone. Target: ≤ 15 ms per command.

    uv run python tools/bench/bench_sandbox.py [--iterations 200] [--command true]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

from dsh.core import AbortSignal
from dsh.core.permissions import SandboxPolicy
from dsh.subprocess import Sandbox, check_sandbox, scrubbed_env
from dsh.tool_shell._run import run_command


async def one(command: str, cwd: str, sandbox: Sandbox | None) -> float:
    started = time.perf_counter()
    result = await run_command(
        ["/bin/sh", "-c", "exec 2>&1\n" + command],
        cwd=cwd,
        env=scrubbed_env(),
        timeout=30,
        max_output_bytes=65536,
        term_grace=1,
        signal=AbortSignal(),
        sandbox=sandbox,
    )
    elapsed = time.perf_counter() - started
    if result.exit_status != 0:
        raise SystemExit(f"{command!r} failed ({result.description}): {result.output}")
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--command", default="true")
    args = parser.parse_args()
    check_sandbox()
    sandbox = Sandbox(SandboxPolicy())
    with tempfile.TemporaryDirectory() as cwd:
        for _ in range(10):  # warm up both paths
            await one(args.command, cwd, None)
            await one(args.command, cwd, sandbox)
        plain: list[float] = []
        boxed: list[float] = []
        for _ in range(args.iterations):
            plain.append(await one(args.command, cwd, None))
            boxed.append(await one(args.command, cwd, sandbox))
    p, b = statistics.median(plain), statistics.median(boxed)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, command {args.command!r}")
    print(f"unsandboxed          median {p * 1e3:7.2f} ms  (n={len(plain)})")
    print(f"sandboxed (bwrap)    median {b * 1e3:7.2f} ms  (n={len(boxed)})")
    print(f"sandbox cost per command: {(b - p) * 1e3:.2f} ms  ({b / p:.2f}x the unsandboxed run)")


if __name__ == "__main__":
    asyncio.run(main())
