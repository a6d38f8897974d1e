"""The a2a provider's overhead over a bare A2A SDK client call to the same server (issue 14).

One sample = one delegation over loopback to one ``dsh a2a`` server (started once, in
memory, on a prompt-keyed scripted model that streams ``Done: <prompt>`` in three chunks):

* **provider**: ``SubagentRuntime.start("a2a", ...)`` → ``await run.result`` →
  ``run.dispose()`` (fetch and check the agent card, publish, ``SendStreamingMessage``,
  fold the stream into the output and progress, settle, close the connections).
* **sdk** (the baseline): what a hand-written one-shot delegation does with the SDK
  alone: a fresh ``httpx.AsyncClient``, ``A2ACardResolver.get_agent_card``,
  ``ClientFactory.create``, ``send_message`` streamed to the terminal status, the
  artifact text joined, the client closed. Its HTTP client reuses one TLS context, as
  the provider's does (httpx builds a new one per client by default, about 20 ms,
  which would flatter the provider); **sdk, default client** is the same call with
  ``httpx.AsyncClient()`` as most code writes it, for reference.
* **sdk, warm** (for reference, not the target): one long-lived SDK client with the card
  already fetched, only the streamed send.

All of them run in the same process and event loop against the same server, interleaved
(ABBA order) after an unmeasured warm-up of each, the garbage collector off during each
sample. Prints the medians, the ratio of the
medians, and the median of the per-pair ratios (each provider run against the SDK run next
to it, which cancels most of the drift of a busy machine). Target: paired ratio <= 1.10.

    uv run python tools/bench/bench_a2a.py [--repetitions N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path

import anyio
import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_a2a import A2AProvider, A2AProviderConfig

PRESET = """
[[plugin]]
name = "dsh-testing-keyed-model"

[agent.model]
adapter = "keyed"
[[agent.model.options.default]]
text = "Done: {prompt}"
chunks = 3
"""
PROMPT = "please say hello"
EXPECTED = f"Done: {PROMPT}"
READY = re.compile(r"dsh a2a: serving \"[^\"]*\" at (\S+) ")
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


def start_server(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    preset = tmp / "served.toml"
    preset.write_text(PRESET)
    log = tmp / "server.stderr"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "dsh.a2a", "--preset", str(preset), "--port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
            cwd=tmp,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = READY.search(log.read_text(errors="replace"))
        if match:
            return process, match.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise SystemExit(f"dsh a2a did not start:\n{log.read_text(errors='replace')}")


def message() -> Message:
    return Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=PROMPT)])


async def stream_answer(client: Client) -> str:
    """Stream one message to its terminal status; the answer. Like the provider, it stops
    reading at the terminal status by cancelling (which unwinds the SDK's nested
    generators now; a ``break`` would leave their clean-up to later, in another sample)."""
    chunks: list[str] = []
    state = TaskState.TASK_STATE_UNSPECIFIED
    with anyio.CancelScope() as scope:
        async for event in client.send_message(SendMessageRequest(message=message())):
            if event.HasField("artifact_update"):
                update = event.artifact_update
                if not update.append:
                    chunks.clear()
                chunks.extend(part.text for part in update.artifact.parts)
            elif event.HasField("status_update"):
                state = event.status_update.status.state
            if state in TERMINAL:
                scope.cancel()
    if state != TaskState.TASK_STATE_COMPLETED:
        raise SystemExit(f"sdk call ended {TaskState.Name(state)}")
    return "".join(chunks)


TLS = httpx.create_ssl_context()


async def sdk_once(url: str, *, default_client: bool = False) -> float:
    """A bare SDK delegation: card, client, streamed send, close. Seconds."""
    started = time.perf_counter()
    tls: ssl.SSLContext | bool = True if default_client else TLS
    async with httpx.AsyncClient(verify=tls, timeout=httpx.Timeout(60, read=None)) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
        answer = await stream_answer(client)
        await client.close()
    elapsed = time.perf_counter() - started
    if answer != EXPECTED:
        raise SystemExit(f"sdk call answered {answer!r}")
    return elapsed


async def warm_once(client: Client) -> float:
    started = time.perf_counter()
    answer = await stream_answer(client)
    elapsed = time.perf_counter() - started
    if answer != EXPECTED:
        raise SystemExit(f"warm sdk call answered {answer!r}")
    return elapsed


async def provider_once(ctx: Context) -> float:
    """One delegation through the provider; seconds from start to disposed."""
    runtime = SubagentRuntime.of(ctx)
    parent = ctx.agents.create()
    started = time.perf_counter()
    run = await runtime.start("a2a", SubagentStartRequest(PROMPT, parent, AbortSignal()))
    result = await run.result
    await run.dispose()
    elapsed = time.perf_counter() - started
    await parent.aclose("bench")
    if result.stop_reason != "completed" or result.output != EXPECTED:
        raise SystemExit(f"provider run failed: {result}")
    return elapsed


async def timed(sample: Awaitable[float]) -> float:
    """One sample with the garbage collector off (collected before), as ``_bench`` does."""
    gc.collect()
    gc.disable()
    try:
        return await sample
    finally:
        gc.enable()


async def bench(url: str, repetitions: int) -> None:
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    async with (
        Context.open(preset) as ctx,
        httpx.AsyncClient(timeout=httpx.Timeout(60, read=None)) as http,
    ):
        SubagentRuntime.of(ctx).register_provider(A2AProvider(A2AProviderConfig(url=url)))
        card = await A2ACardResolver(http, url).get_agent_card()
        warm = ClientFactory(ClientConfig(httpx_client=http)).create(card)
        for _ in range(3):  # warm-up
            await sdk_once(url)
            await provider_once(ctx)
            await warm_once(warm)
            await sdk_once(url, default_client=True)
        sdk: list[float] = []
        ours: list[float] = []
        warm_samples: list[float] = []
        default: list[float] = []
        for index in range(repetitions):
            if index % 2 == 0:
                sdk.append(await timed(sdk_once(url)))
                ours.append(await timed(provider_once(ctx)))
            else:
                ours.append(await timed(provider_once(ctx)))
                sdk.append(await timed(sdk_once(url)))
            warm_samples.append(await timed(warm_once(warm)))
            default.append(await timed(sdk_once(url, default_client=True)))

    def line(name: str, samples: list[float]) -> str:
        return (
            f"{name:<34} median {statistics.median(samples) * 1000:7.2f} ms"
            f"   p10 {sorted(samples)[len(samples) // 10] * 1000:7.2f}"
            f"   p90 {sorted(samples)[len(samples) * 9 // 10] * 1000:7.2f}"
        )

    print(f"a2a provider bench: dsh a2a at {url} (in-memory task store), prompt {PROMPT!r}")
    print(f"  {repetitions} interleaved repetitions each (ABBA), 3 warm-up runs each")
    print(line("sdk: card + client + stream", sdk))
    print(line("dsh a2a provider (start..dispose)", ours))
    print(line("sdk warm client: stream only", warm_samples))
    print(line("sdk, default client: card + stream", default))
    ratio = statistics.median(ours) / statistics.median(sdk)
    paired = statistics.median(o / s for o, s in zip(ours, sdk, strict=True))
    extra = statistics.median(o - s for o, s in zip(ours, sdk, strict=True))
    print(f"ratio of medians (provider / sdk):          {ratio:.3f} ({(ratio - 1) * 100:+.1f} %)")
    print(
        f"median of paired ratios (same-slot pairs):  {paired:.3f} ({(paired - 1) * 100:+.1f} %),"
        f" median paired difference {extra * 1000:+.2f} ms"
    )
    verdict = "OK" if paired <= 1.10 else "ABOVE TARGET"
    print(f"target: paired ratio <= 1.10: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repetitions", "-n", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dsh-bench-a2a-") as tmp:
        process, url = start_server(Path(tmp))
        try:
            asyncio.run(bench(url, args.repetitions))
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
