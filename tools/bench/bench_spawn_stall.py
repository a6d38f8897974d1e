"""Event-loop stall while many child processes start and are torn down (issue 10 item 8).

One sample: N children (``sleep 30``) started at once with ``asyncio.gather``, then all
torn down at once, while a ticker task sleeps 5 ms at a time; the stall is the longest
gap between two ticks beyond the 5 ms it asked for. Three ways to start them, each in a
fresh process:

* ``ChildProcess``: :meth:`dsh.subprocess.ChildProcess.start` with a ``RunTag`` (as
  ``SubprocessRun`` does): spawned in worker threads, exit watched by pidfd, torn
  down by ``terminate()`` (stdin EOF, 0.1 s, SIGTERM to the group, tag sweep off the loop);
* baseline ``asyncio (vfork)``: ``asyncio.create_subprocess_exec`` in a new session,
  which forks and execs on the loop thread (vfork, no ``preexec_fn``), SIGTERM and wait;
* baseline ``asyncio + preexec_fn``: the same with a ``preexec_fn`` (how the parent-death
  signal used to be set up): a full fork of this process on the loop thread per child.

The floor is the same ticker on an idle loop. Target: stall ≤ 100 ms with ChildProcess.

    uv run python tools/bench/bench_spawn_stall.py [--children 200] [--repetitions 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from dsh.subprocess import ChildProcess, RunTag, scrubbed_env

TICK = 0.005
MODES = ("idle", "childprocess", "asyncio-vfork", "asyncio-preexec")


class Ticker:
    """Records every gap between ticks of a 5 ms sleeper (beyond the 5 ms)."""

    def __init__(self) -> None:
        self.gaps: list[float] = []

    async def run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(TICK)
            now = time.perf_counter()
            self.gaps.append(now - last - TICK)
            last = now


async def stalled(work: Callable[[], Awaitable[Any]]) -> tuple[Any, dict[str, float]]:
    ticker = Ticker()
    task = asyncio.get_running_loop().create_task(ticker.run())
    await asyncio.sleep(0.05)
    ticker.gaps.clear()
    started = time.perf_counter()
    result = await work()
    wall = time.perf_counter() - started
    await asyncio.sleep(2 * TICK)  # the tick that ends the last gap
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return result, {"wall_s": wall, "max_stall_ms": max(ticker.gaps) * 1e3}


def noop() -> None:
    return None


async def worker(mode: str, children: int) -> dict[str, dict[str, float]]:
    env = scrubbed_env()
    if mode == "idle":
        _, figures = await stalled(lambda: asyncio.sleep(1.0))
        return {"start": figures, "teardown": figures}
    if mode == "childprocess":

        async def start_one() -> ChildProcess:
            return await ChildProcess.start(["sleep", "30"], env=env, cwd="/", tag=RunTag())

        async def start_all() -> list[ChildProcess]:
            return await asyncio.gather(*(start_one() for _ in range(children)))

        await (await start_one()).terminate(eof_grace=0, term_grace=1)  # warm-up
        started, start = await stalled(start_all)

        async def stop_all() -> list[str]:
            return await asyncio.gather(
                *(c.terminate(eof_grace=0.1, term_grace=2) for c in started)
            )

        endings, teardown = await stalled(stop_all)
        assert set(endings) == {"terminated"}, set(endings)
        return {"start": start, "teardown": teardown}

    preexec = noop if mode == "asyncio-preexec" else None

    async def spawn_one() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            "sleep",
            "30",
            env=env,
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
        )

    async def spawn_all() -> list[asyncio.subprocess.Process]:
        return await asyncio.gather(*(spawn_one() for _ in range(children)))

    async def stop(process: asyncio.subprocess.Process) -> int:
        process.send_signal(signal.SIGTERM)
        return await process.wait()

    warm = await spawn_one()
    await stop(warm)
    processes, start = await stalled(spawn_all)
    codes, teardown = await stalled(lambda: asyncio.gather(*(stop(p) for p in processes)))
    assert set(codes) == {-signal.SIGTERM}, set(codes)
    return {"start": start, "teardown": teardown}


def run_worker(mode: str, children: int) -> dict[str, dict[str, float]]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", mode, "--children", str(children)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main(children: int, repetitions: int) -> int:
    samples: dict[str, list[dict[str, dict[str, float]]]] = {mode: [] for mode in MODES}
    for _ in range(repetitions):  # interleaved, so a noisy moment hits every mode
        for mode in MODES:
            samples[mode].append(run_worker(mode, children))

    def median(mode: str, phase: str, key: str) -> float:
        return statistics.median(s[phase][key] for s in samples[mode])

    def worst(mode: str, phase: str, key: str) -> float:
        return max(s[phase][key] for s in samples[mode])

    floor = median("idle", "start", "max_stall_ms")
    print(
        f"event-loop stall: {children} children started at once, then torn down at once"
        f" (median of {repetitions} fresh processes; stall = longest tick gap beyond 5 ms)"
    )
    print(f"  idle loop (floor): max stall {floor:.1f} ms\n")
    names = {
        "childprocess": "ChildProcess + RunTag (dsh.subprocess)",
        "asyncio-vfork": "asyncio subprocess, vfork on the loop",
        "asyncio-preexec": "asyncio subprocess + preexec_fn (fork)",
    }
    for phase in ("start", "teardown"):
        print(f"[{phase}]")
        for mode, name in names.items():
            print(
                f"  {name:<42} wall {median(mode, phase, 'wall_s'):6.3f} s"
                f"   max stall {median(mode, phase, 'max_stall_ms'):7.1f} ms"
                f" (worst {worst(mode, phase, 'max_stall_ms'):7.1f})"
            )
        ours = median("childprocess", phase, "max_stall_ms")
        for mode in ("asyncio-vfork", "asyncio-preexec"):
            theirs = median(mode, phase, "max_stall_ms")
            print(f"  ratio ChildProcess / {mode}: {ours / theirs:.2f}x")
        print(f"  ratio ChildProcess / idle floor: {ours / floor:.1f}x\n")
    worst_ours = max(worst("childprocess", p, "max_stall_ms") for p in ("start", "teardown"))
    verdict = "met" if worst_ours <= 100 else "NOT met"
    print(f"target: ChildProcess stall ≤ 100 ms in every sample: {verdict}", end="")
    print(f" (worst {worst_ours:.1f} ms)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", choices=MODES)
    parser.add_argument("--children", type=int, default=200)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(asyncio.run(worker(args.worker, args.children))))
        sys.exit(0)
    sys.exit(main(args.children, args.repetitions))
