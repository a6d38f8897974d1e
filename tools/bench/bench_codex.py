"""The codex provider's overhead over driving the same codex binary by hand (issue 6).

One sample = one delegation, from the start call until the child has exited:

* **provider**: ``SubagentRuntime.start("codex", ...)`` → ``await run.result`` →
  ``run.dispose()`` (spawn, initialize, thread/start, turn/start, the turn,
  teardown; the provider settles only after the process is gone).
* **direct** (the baseline): the same codex binary, argv, environment and cwd
  driven with the bare JSON-RPC client below (spawn, initialize, initialized,
  thread/start, turn/start, read until ``turn/completed``, close stdin, wait for
  the exit).

Both talk to one fake Responses server (127.0.0.1, started once) with the same
prompt, in the same process and event loop, interleaved (ABBA order) after an
unmeasured warm-up of each. Prints both medians, their ratio, and the median of
the per-pair ratios (each provider run against the direct run next to it, which
cancels most of the drift of a busy machine). Target: paired ratio ≤ 1.05.

    tools/install-codex.sh   # once
    uv run python tools/bench/bench_codex.py [--repetitions N] [--tool] [--codex PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_codex import CodexConfig, CodexProvider
from dsh.subprocess import provider_env
from dsh.testing.model_servers import (
    FunctionCall,
    OpenAIResponsesServer,
    ResponsesReply,
    codex_offline_env,
    reply_with_tool_output,
)

REPO = Path(__file__).resolve().parents[2]


async def direct_once(
    argv: list[str], env: dict[str, str], cwd: str, prompt: str, permissions: dict[str, str]
) -> float:
    """One delegation with a bare JSON-RPC client; seconds from spawn to exit."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
        limit=64 * 1024 * 1024,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    next_id = 0

    async def send(message: dict[str, Any]) -> None:
        stdin.write((json.dumps(message) + "\n").encode())
        await stdin.drain()

    async def call(method: str, params: dict[str, Any]) -> Any:
        nonlocal next_id
        next_id += 1
        await send({"method": method, "id": next_id, "params": params})
        while True:
            message = await read()
            if message.get("id") == next_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    completed: list[dict[str, Any]] = []

    async def read() -> dict[str, Any]:
        line = await stdout.readline()
        if not line:
            raise RuntimeError("codex exited")
        message: dict[str, Any] = json.loads(line)
        if "method" in message and "id" in message:  # a server request: decline
            await send({"id": message["id"], "result": {"decision": "decline"}})
        elif message.get("method") == "turn/completed":
            completed.append(message["params"]["turn"])
        return message

    await call(
        "initialize",
        {
            "clientInfo": {"name": "bench", "title": None, "version": "0"},
            "capabilities": {"experimentalApi": False, "requestAttestation": False},
        },
    )
    await send({"method": "initialized"})
    thread = await call("thread/start", {"cwd": cwd, "ephemeral": True, **permissions})
    text_input = [{"type": "text", "text": prompt, "text_elements": []}]
    await call("turn/start", {"threadId": thread["thread"]["id"], "input": text_input})
    while not completed:
        await read()
    stdin.close()
    await proc.wait()
    elapsed = time.perf_counter() - started
    turn = completed[0]
    answers = [i["text"] for i in turn["items"] if i["type"] == "agentMessage" and i["text"]]
    if turn["status"] != "completed" or not answers:
        raise SystemExit(f"direct run failed: {turn}")
    return elapsed


async def provider_once(ctx: Context, prompt: str) -> float:
    """One delegation through the provider; seconds from start to disposed."""
    runtime = SubagentRuntime.of(ctx)
    parent = ctx.agents.create()
    started = time.perf_counter()
    run = await runtime.start("codex", SubagentStartRequest(prompt, parent, AbortSignal()))
    result = await run.result
    await run.dispose()
    elapsed = time.perf_counter() - started
    await parent.aclose("bench")
    if result.stop_reason != "completed":
        raise SystemExit(f"provider run failed: {result}")
    return elapsed


def find_codex(explicit: str | None) -> str:
    """The codex binary: --codex, env DSH_CODEX_BIN, else the repo's pinned install."""
    path = explicit or os.environ.get("DSH_CODEX_BIN") or str(REPO / ".tools/codex/bin/codex")
    if not os.access(path, os.X_OK):
        raise SystemExit(f"codex not found at {path}: run tools/install-codex.sh")
    return path


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", "-n", type=int, default=20)
    parser.add_argument("--tool", action="store_true", help="a tool round trip per delegation")
    parser.add_argument("--codex", help="codex binary (default: DSH_CODEX_BIN or .tools/codex)")
    args = parser.parse_args()
    codex = find_codex(args.codex)

    server = OpenAIResponsesServer()
    server.when("say hello", "Hello from the fake model.")
    server.when(
        "run echo",
        ResponsesReply(function_calls=[FunctionCall("exec_command", {"cmd": "echo hi"})]),
        reply_with_tool_output("Tool said: {output}"),
    )
    prompt = "run echo please" if args.tool else "please say hello"
    with server, tempfile.TemporaryDirectory(prefix="dsh-bench-codex-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        offline = codex_offline_env(server.api_base, tmp)
        codex_home = offline.pop("CODEX_HOME")
        config = CodexConfig(
            command=codex, codex_home=codex_home, env=offline, permission_mode="full-access"
        )
        provider = CodexProvider(config)
        settings = config.permissions
        permissions = {"approvalPolicy": settings.approval_policy, "sandbox": settings.sandbox}
        # the environment the provider gives codex (but the run's depth variables)
        env = provider_env(config, {"RUST_LOG": "warn", "CODEX_HOME": codex_home})
        argv, cwd = config.argv, str(workspace)
        preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
        async with Context.open(preset, cwd=workspace) as ctx:
            SubagentRuntime.of(ctx).register_provider(provider)
            await direct_once(argv, env, cwd, prompt, permissions)  # warm-up
            await provider_once(ctx, prompt)
            direct: list[float] = []
            ours: list[float] = []
            for index in range(args.repetitions):
                if index % 2 == 0:
                    direct.append(await direct_once(argv, env, cwd, prompt, permissions))
                    ours.append(await provider_once(ctx, prompt))
                else:
                    ours.append(await provider_once(ctx, prompt))
                    direct.append(await direct_once(argv, env, cwd, prompt, permissions))
        requests = len(server.requests)

    def line(name: str, samples: list[float]) -> str:
        return (
            f"{name:<26} median {statistics.median(samples) * 1000:7.1f} ms"
            f"   mean {statistics.fmean(samples) * 1000:7.1f} ms"
            f"   min {min(samples) * 1000:7.1f} ms   max {max(samples) * 1000:7.1f} ms"
        )

    kind = "tool round trip (2 model requests)" if args.tool else "one text reply"
    print(f"codex provider bench: {codex}")
    print(f"  {args.repetitions} interleaved repetitions each, {kind}, {requests} model requests")
    print(line("direct bare JSON-RPC", direct))
    print(line("dsh codex provider", ours))
    ratio = statistics.median(ours) / statistics.median(direct)
    paired = statistics.median(o / d for o, d in zip(ours, direct, strict=True))
    extra = statistics.median(o - d for o, d in zip(ours, direct, strict=True))
    print(f"ratio of medians (provider / direct):       {ratio:.3f} ({(ratio - 1) * 100:+.1f} %)")
    print(
        f"median of paired ratios (same-slot pairs):  {paired:.3f} ({(paired - 1) * 100:+.1f} %),"
        f" median paired difference {extra * 1000:+.1f} ms"
    )
    verdict = "OK" if paired <= 1.05 else "ABOVE TARGET"
    print(f"target: paired ratio <= 1.05: {verdict}")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
