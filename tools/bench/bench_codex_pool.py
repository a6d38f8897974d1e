"""Codex with a warm app-server: the run's start → result against the model server's
own time to answer (issue 15).

One sample = one delegation through ``SubagentRuntime.start("codex", ...)`` to a
fake Responses server (127.0.0.1, one text reply), timed from the start call to
the settled result; ``run.dispose()`` is not timed. The server records, for the one
model request of the run, the time from having read the request to having sent the
whole streamed answer: **the model server's own time**. The figure is their
difference per sample (what codex and dsh add around the model):

* **warm**: ``pool = { size = 1 }``: the run takes a handshaken ``codex app-server``
  and does ``thread/start`` (ephemeral, the run's cwd), ``turn/start``, the turn,
  and at dispose ``thread/unsubscribe`` (the app-server goes back to the pool).
* **cold** (for reference): no pool: spawn, ``initialize``, ``thread/start``, the
  turn, teardown.

Same process, event loop and server, interleaved (ABBA) after an unmeasured
warm-up of each; a warm sample waits until the pool is full again. Target: warm
median overhead ≤ 50 ms.

    tools/install-codex.sh   # once
    uv run python tools/bench/bench_codex_pool.py [--repetitions N] [--codex PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import Timing

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_codex import CodexConfig, CodexProvider
from dsh.testing.model_servers import Exchange, OpenAIResponsesServer, codex_offline_env

REPO = Path(__file__).resolve().parents[2]
PROMPT = "please say hello"
ANSWER = "Hello from the fake model."
TARGET = 0.050


class TimedServer(OpenAIResponsesServer):
    """The fake Responses server, recording how long it takes to answer each request."""

    def __init__(self) -> None:
        super().__init__()
        self.answer_times: list[float] = []

    async def perform(self, item: Any, exchange: Exchange) -> None:
        started = time.perf_counter()
        await super().perform(item, exchange)
        self.answer_times.append(time.perf_counter() - started)


class Side:
    """One provider (cold or warm) in a context of its own."""

    def __init__(self, ctx: Context, provider: CodexProvider, server: TimedServer) -> None:
        self.ctx = ctx
        self.provider = provider
        self.server = server
        self.runtime = SubagentRuntime.of(ctx)
        self.runtime.register_provider(provider)
        self.parent = ctx.agents.create()
        self.results: list[float] = []
        self.model: list[float] = []

    async def once(self, record: bool = True) -> None:
        pool = self.provider.pool(self.ctx)
        if pool is not None:
            await pool.wait_ready()
        before = len(self.server.answer_times)
        request = SubagentStartRequest(PROMPT, self.parent, AbortSignal())
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            run = await self.runtime.start(self.provider.name, request)
            result = await run.result
            elapsed = time.perf_counter() - started
        finally:
            gc.enable()
        await run.dispose()
        if (result.stop_reason, result.output) != ("completed", ANSWER):
            raise SystemExit(f"unexpected result {result}")
        answers = self.server.answer_times[before:]
        if len(answers) != 1:
            raise SystemExit(f"expected one model request per run, saw {len(answers)}")
        if record:
            self.results.append(elapsed)
            self.model.append(answers[0])


def find_codex(explicit: str | None) -> str:
    """The codex binary: --codex, env DSH_CODEX_BIN, else the repo's pinned install."""
    path = explicit or os.environ.get("DSH_CODEX_BIN") or str(REPO / ".tools/codex/bin/codex")
    if not os.access(path, os.X_OK):
        raise SystemExit(f"codex not found at {path}: run tools/install-codex.sh")
    return path


def ms(timing: Timing) -> str:
    return (
        f"{timing.name:<44} median {timing.median * 1000:8.1f} ms   "
        f"p10 {timing.p(0.1) * 1000:8.1f}   p90 {timing.p(0.9) * 1000:8.1f}   "
        f"(n={len(timing.samples)})"
    )


async def main(repetitions: int, codex: str) -> int:
    server = TimedServer()
    server.when("say hello", ANSWER)
    with server, tempfile.TemporaryDirectory(prefix="dsh-bench-codex-pool-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        offline = codex_offline_env(server.api_base, tmp)
        codex_home = offline.pop("CODEX_HOME")
        common: dict[str, Any] = {
            "command": codex,
            "codex_home": codex_home,
            "env": offline,
            "permission_mode": "full-access",
        }
        cold_config = CodexConfig(name="codex-cold", **common)
        warm_config = CodexConfig(name="codex-warm", pool={"size": 1, "max_runs": 1000}, **common)
        preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
        async with (
            Context.open(preset, cwd=workspace) as cold_ctx,
            Context.open(preset, cwd=workspace) as warm_ctx,
        ):
            cold = Side(cold_ctx, CodexProvider(cold_config), server)
            warm = Side(warm_ctx, CodexProvider(warm_config), server)
            pool = warm.provider.pool(warm_ctx)
            assert pool is not None
            await cold.once(record=False)
            await warm.once(record=False)
            for index in range(repetitions):
                order = (cold, warm) if index % 2 == 0 else (warm, cold)
                for side in order:
                    await side.once()
            started, recycled = pool.started, dict(pool.recycled)

    def overhead(side: Side) -> list[float]:
        return [run - model for run, model in zip(side.results, side.model, strict=True)]

    warm_over = Timing("warm: start → result minus model time", overhead(warm))
    print(f"codex pool bench: {codex}, {repetitions} interleaved repetitions each")
    print(ms(Timing("model server's own time (every request)", warm.model + cold.model)))
    print(ms(Timing("warm pool: start → settled result", warm.results)))
    print(ms(warm_over))
    print(ms(Timing("cold: start → settled result", cold.results)))
    print(ms(Timing("cold: start → result minus model time", overhead(cold))))
    print(f"warm pool: {started} app-servers started, recycled {recycled or 'none'}")
    speedup = statistics.median(cold.results) / statistics.median(warm.results)
    print(f"speed-up: {speedup:.1f}x (median cold / median warm)")
    verdict = "meets" if warm_over.median <= TARGET else "MISSES"
    print(f"target: warm median overhead <= {TARGET * 1000:.0f} ms: {verdict}")
    return 0 if warm_over.median <= TARGET else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", "-n", type=int, default=20)
    parser.add_argument("--codex", help="codex binary (default: DSH_CODEX_BIN or .tools/codex)")
    arguments = parser.parse_args()
    sys.exit(asyncio.run(main(arguments.repetitions, find_codex(arguments.codex))))
