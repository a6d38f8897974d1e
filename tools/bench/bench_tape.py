"""What the tape proxy (dsh-tape, issue 24) costs per model call.

A streamed chat completion (20 SSE deltas, a 2 KB system prompt) from the fake OpenAI
chat server, three ways: straight to the server; through a ``TapeProxy`` recording
it; and answered from that tape by a replaying proxy with the server closed. Direct
and recorded calls alternate, so a busy machine slows both alike.

    uv run python tools/bench/bench_tape.py [--calls N] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any

import httpx
from _bench import Timing, report_ratio, write_json

from dsh.tape import TapeProxy
from dsh.testing.model_servers import ChatReply, OpenAIChatServer


def body(i: int) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": True,
        "messages": [
            {"role": "system", "content": "s" * 2000},
            {"role": "user", "content": f"task {i}"},
        ],
    }


def call(client: httpx.Client, base: str, i: int) -> float:
    started = time.perf_counter()
    with client.stream("POST", base + "/chat/completions", json=body(i)) as response:
        for _ in response.iter_bytes():
            pass
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    reply = ChatReply(text="word " * 200, text_chunks=20)
    with tempfile.TemporaryDirectory() as tape, httpx.Client(timeout=30) as client:
        server = OpenAIChatServer(default=reply)
        with server, TapeProxy(tape, "record", {"openai": server.api_base}) as proxy:
            for i in range(1, 51):  # warm up both paths (other tasks: not replayed below)
                call(client, server.api_base, -i)
                call(client, proxy.base_url("openai"), -i)
            direct: list[float] = []
            recorded: list[float] = []
            for i in range(args.calls):
                direct.append(call(client, server.api_base, i))
                recorded.append(call(client, proxy.base_url("openai"), i))
        with TapeProxy(tape, "replay") as proxy:
            replayed = [call(client, proxy.base_url("openai"), i) for i in range(args.calls)]
            assert proxy.divergence is None, proxy.divergence
    timings = [
        Timing("direct to the fake server", direct),
        Timing("through a recording TapeProxy", recorded),
        Timing("answered by a replaying TapeProxy", replayed),
    ]
    for timing in timings:
        print(timing.line())
    a, b, c = (t.median for t in timings)
    print(f"recording costs {(b - a) * 1e3:.2f} ms per call (median)")
    print(report_ratio("replay vs the fake server", c, a))
    if args.json:
        results = {t.name: {"median_s": t.median, "p90_s": t.p(0.9)} for t in timings}
        write_json(args.json, "tape", {"calls": args.calls, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
