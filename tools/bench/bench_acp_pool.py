"""Delegation to a ``dsh acp`` child: warm pool against a cold start (issue 15).

One sample = one delegation through ``SubagentRuntime.start("acp", ...)`` from the
start call to the settled result (``await run.result``), then ``run.dispose()``
(not timed; reported apart). The child is ``python -m dsh.cli acp --preset P`` on a
scripted model that answers ``pong: <prompt>`` at once.

* **cold**: the provider without a pool: every run spawns the agent, imports, and
  does ``initialize``, ``session/new``, the prompt, then the process is torn down.
* **warm**: the same command with ``pool = { size = 2 }``: the run takes an
  initialized agent, ``session/new`` in the run's cwd, the prompt, ``session/close``
  at dispose, and the process goes back to the pool.

Both in the same process and event loop, one context each, interleaved (ABBA
order) after an unmeasured warm-up of each; a warm sample waits until the pool is
full again (so a refill never competes with the measured run for the CPU), a cold
one until the previous child is gone. Target: warm median ≤ 100 ms (cold today
~1.3–1.6 s).

    uv run python tools/bench/bench_acp_pool.py [--repetitions N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

from _bench import Timing

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_acp import AcpProvider, AcpProviderConfig

CHILD_PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
text = "pong: {prompt}"
"""
PARENT_PRESET = '[agent.model]\nadapter = "scripted"\n'
TARGET = 0.100


class Side:
    """One provider (cold or warm) in a context of its own."""

    def __init__(self, ctx: Context, provider: AcpProvider) -> None:
        self.ctx = ctx
        self.provider = provider
        self.runtime = SubagentRuntime.of(ctx)
        self.runtime.register_provider(provider)
        self.parent = ctx.agents.create()
        self.results: list[float] = []
        self.disposes: list[float] = []

    async def ready(self) -> None:
        pool = self.provider.pool(self.ctx)
        if pool is not None:
            await pool.wait_ready()

    async def once(self, record: bool = True) -> None:
        await self.ready()
        request = SubagentStartRequest("ping", self.parent, AbortSignal())
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            run = await self.runtime.start(self.provider.name, request)
            result = await run.result
            elapsed = time.perf_counter() - started
        finally:
            gc.enable()
        disposing = time.perf_counter()
        await run.dispose()
        disposed = time.perf_counter() - disposing
        if (result.stop_reason, result.output) != ("completed", "pong: ping"):
            raise SystemExit(f"unexpected result {result}")
        if record:
            self.results.append(elapsed)
            self.disposes.append(disposed)


def ms(timing: Timing) -> str:
    return (
        f"{timing.name:<44} median {timing.median * 1000:8.1f} ms   "
        f"p10 {timing.p(0.1) * 1000:8.1f}   p90 {timing.p(0.9) * 1000:8.1f}   "
        f"(n={len(timing.samples)})"
    )


async def main(repetitions: int) -> int:
    with tempfile.TemporaryDirectory(prefix="dsh-bench-acp-pool-") as folder:
        preset = Path(folder) / "child.toml"
        preset.write_text(CHILD_PRESET, encoding="utf-8")
        args = ["-m", "dsh.cli", "acp", "--preset", str(preset)]
        common = {"command": sys.executable, "args": args, "depth_limit": True}
        cold_config = AcpProviderConfig(name="acp-cold", **common)
        warm_config = AcpProviderConfig(
            name="acp-warm", pool={"size": 2, "max_runs": 1000}, **common
        )
        parent_preset = parse_preset(PARENT_PRESET)
        async with (
            Context.open(parent_preset, cwd=folder) as cold_ctx,
            Context.open(parent_preset, cwd=folder) as warm_ctx,
        ):
            cold = Side(cold_ctx, AcpProvider(cold_config))
            warm = Side(warm_ctx, AcpProvider(warm_config))
            pool = warm.provider.pool(warm_ctx)
            assert pool is not None
            await cold.once(record=False)  # imports in the parent, bytecode caches
            await warm.once(record=False)
            for index in range(repetitions):
                order = (cold, warm) if index % 2 == 0 else (warm, cold)
                for side in order:
                    await side.once()
            started, recycled = pool.started, dict(pool.recycled)

    cold_t = Timing("cold: spawn → settled result", cold.results)
    warm_t = Timing("warm pool: start → settled result", warm.results)
    print(f"acp pool bench: dsh acp child, {repetitions} interleaved repetitions each")
    print(ms(cold_t))
    print(ms(warm_t))
    print(ms(Timing("cold: dispose (process torn down)", cold.disposes)))
    print(ms(Timing("warm: dispose (session/close, back to pool)", warm.disposes)))
    print(f"warm pool: {started} processes started, recycled {recycled or 'none'}")
    print(f"speed-up: {cold_t.median / warm_t.median:.0f}x (median cold / median warm)")
    verdict = "meets" if warm_t.median <= TARGET else "MISSES"
    print(f"target: warm median <= {TARGET * 1000:.0f} ms: {verdict}")
    return 0 if warm_t.median <= TARGET else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", "-n", type=int, default=15)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(asyncio.run(main(parser.parse_args().repetitions)))
