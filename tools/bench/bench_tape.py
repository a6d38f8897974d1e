"""What a tape (dsh-tape, issue 24) costs per model call, and how fast it replays.

A streamed chat completion (20 SSE deltas, a 2 KB system prompt) from the fake OpenAI
chat server, each call numbered (so every request is a different one), two ways of
reaching the tape:

* **in process** — the model's own ``httpx.AsyncClient`` over
  :meth:`TapeProxy.transport` (what ``Context.open(record=...)`` and ``dsh run
  --record/--replay`` give the run's own agents);
* **through the proxy** — over HTTP to the ``TapeProxy`` (what a child process gets).

Recording: each call goes straight to the server, then through each recording way,
in turn. Replay: the same calls answered from the two tapes, each alternated with the
same call straight to the server. Medians per call, and the issue's ratio — the
fake-server run over the in-process replay of the same calls (target ≥ 5x). Also the
whole model call as an agent makes it (dsh-llm-openai's adapter, SSE parsed), straight
and replayed in process.

    uv run python tools/bench/bench_tape.py [--calls N] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from typing import Any

import httpx
from _bench import Timing, write_json

from dsh.core import AbortSignal, ModelRequest
from dsh.core.sessions import Event
from dsh.llm_openai import OpenAIChatAdapter, OpenAIOptions
from dsh.tape import TapeProxy
from dsh.testing.model_servers import ChatReply, OpenAIChatServer

SYSTEM = "s" * 2000


def body(i: int) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": True,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"task {i}"},
        ],
    }


async def call(client: httpx.AsyncClient, base: str, i: int) -> float:
    started = time.perf_counter()
    async with client.stream("POST", base + "/chat/completions", json=body(i)) as response:
        async for _ in response.aiter_bytes():
            pass
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}")
    return time.perf_counter() - started


def request(i: int) -> ModelRequest:
    event = Event(0, "user/message", {"content": f"task {i}"}, 0.0)
    return ModelRequest("m", SYSTEM, [event], [])


async def model_call(adapter: OpenAIChatAdapter, i: int) -> float:
    started = time.perf_counter()
    async for _ in adapter.stream(request(i), AbortSignal()):
        pass
    return time.perf_counter() - started


def adapter(base_url: str) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(OpenAIOptions(base_url=base_url, api_key_env="", pricing="none"))


async def main(calls: int, json_path: str | None) -> int:
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    reply = ChatReply(text="word " * 200, text_chunks=20)
    samples: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        samples.setdefault(name, []).append(seconds)

    with tempfile.TemporaryDirectory() as tmp, OpenAIChatServer(default=reply) as server:
        tapes = {way: os.path.join(tmp, way) for way in ("proxy", "in-process", "adapter")}
        direct = httpx.AsyncClient(timeout=30)
        straight = adapter(server.api_base)
        async with direct, straight:
            with (
                TapeProxy(tapes["proxy"], "record", {"openai": server.api_base}) as via_proxy,
                TapeProxy(tapes["in-process"], "record", {"openai": server.api_base}) as local,
                TapeProxy(tapes["adapter"], "record", {"openai": server.api_base}) as local_model,
            ):
                taped = httpx.AsyncClient(transport=local.transport("openai"), timeout=30)
                taped_model = adapter(local_model.base_url("openai")).with_transport(
                    local_model.transport("openai")
                )
                async with taped, taped_model:
                    for i in range(-50, calls):  # the first 50 warm up (not replayed below)
                        timings = (
                            ("direct to the fake server", await call(direct, server.api_base, i)),
                            (
                                "recorded through the proxy",
                                await call(direct, via_proxy.base_url("openai"), i),
                            ),
                            (
                                "recorded in process",
                                await call(taped, local.base_url("openai"), i),
                            ),
                            ("model call, fake server", await model_call(straight, i)),
                            ("model call, recorded in process", await model_call(taped_model, i)),
                        )
                        if i >= 0:
                            for name, seconds in timings:
                                add(f"record: {name}", seconds)
            served = len(server.requests)
            with (
                TapeProxy(tapes["proxy"], "replay") as via_proxy,
                TapeProxy(tapes["in-process"], "replay") as local,
                TapeProxy(tapes["adapter"], "replay") as local_model,
            ):
                taped = httpx.AsyncClient(transport=local.transport("openai"), timeout=30)
                taped_model = adapter(local_model.base_url("openai")).with_transport(
                    local_model.transport("openai")
                )
                async with taped, taped_model:
                    for i in range(-50, calls):
                        timings = (
                            ("direct to the fake server", await call(direct, server.api_base, i)),
                            (
                                "replayed through the proxy",
                                await call(direct, via_proxy.base_url("openai"), i),
                            ),
                            ("replayed in process", await call(taped, local.base_url("openai"), i)),
                            ("model call, fake server", await model_call(straight, i)),
                            ("model call, replayed in process", await model_call(taped_model, i)),
                        )
                        if i >= 0:
                            for name, seconds in timings:
                                add(f"replay: {name}", seconds)
                for proxy in (via_proxy, local, local_model):
                    assert proxy.divergence is None, proxy.divergence
                    assert proxy.replayed == calls + 50, (proxy, proxy.replayed)
            # the replays asked the server nothing: only the interleaved direct calls
            assert len(server.requests) == served + 2 * (calls + 50)
    print(f"load after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    timing = {name: Timing(name, values) for name, values in samples.items()}
    for each in timing.values():
        print(each.line())

    def median(name: str) -> float:
        return timing[name].median

    results: dict[str, Any] = {name: {"median_s": t.median} for name, t in timing.items()}
    lines = [
        (
            "recording in process costs",
            median("record: recorded in process") - median("record: direct to the fake server"),
        ),
        (
            "recording through the proxy costs",
            median("record: recorded through the proxy")
            - median("record: direct to the fake server"),
        ),
    ]
    print()
    for text, seconds in lines:
        print(f"{text} {seconds * 1e3:.3f} ms per call (median)")
    ratios = {
        "replay_in_process": (
            median("replay: direct to the fake server") / median("replay: replayed in process")
        ),
        "replay_through_proxy": (
            median("replay: direct to the fake server")
            / median("replay: replayed through the proxy")
        ),
        "model_call_replay_in_process": (
            median("replay: model call, fake server")
            / median("replay: model call, replayed in process")
        ),
    }
    print(
        f"replay in process: {ratios['replay_in_process']:.2f}x the speed of the fake server"
        " (target ≥ 5x)"
    )
    print(f"replay through the proxy: {ratios['replay_through_proxy']:.2f}x")
    print(
        "a whole model call (adapter, SSE parsed) replayed in process:"
        f" {ratios['model_call_replay_in_process']:.2f}x"
    )
    if json_path:
        write_json(json_path, "tools/bench/bench_tape.py", {"calls": calls, **results, **ratios})
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.calls, args.json)))
