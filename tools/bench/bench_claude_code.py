"""The claude-code provider's cost per delegation, and how fast a cancel clears the CLI.

1. Wall time per delegation: our provider (registry start → result → dispose) vs a
   bare ``claude_agent_sdk.query()`` with the same CLI flags and environment,
   against the same fake Messages API in the same run, interleaved; medians and
   the overhead ratio (target ≤ 1.05).
2. Cancel-to-tree-gone: a run whose Bash tool is blocked in ``tail -f``
   (processes in a session of their own), and a run whose model stream stalls,
   are cancelled; seconds until the CLI and every tool process are gone: ours
   (abort signal) vs the SDK's own transport (the task iterating ``query()`` is
   cancelled). With ``--double-cancel`` also the
   SDK's transport cancelled twice 50 ms apart (it leaks the tree; the bench
   kills it afterwards).

    uv run python tools/bench/bench_claude_code.py [--repetitions N] [--cancels M] [--double-cancel]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from claude_agent_sdk import ClaudeAgentOptions, query

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh.testing.model_servers import (
    AnthropicMessagesServer,
    MessagesReply,
    StreamFaults,
    ToolUse,
    claude_code_env,
)
from dsh.testing.processes import alive, cmdline, descendants, live_children, wait_until_gone

MODEL = "claude-sonnet-4-5"
BLOCKING = "tail -f /dev/null & tail -f /dev/null"


def stats(samples: list[float]) -> str:
    ordered = sorted(samples)
    return (
        f"median {statistics.median(samples):6.3f} s   min {ordered[0]:6.3f}   "
        f"max {ordered[-1]:6.3f}   (n={len(samples)})"
    )


async def tool_tree(roots: Callable[[], set[int]], ready: Callable[[], bool]) -> set[int]:
    """The process tree once ``ready()``, or both blocking tool processes run."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        top = roots()
        tree = top | {p for pid in top for p in descendants(pid)}
        tails = sum(cmdline(pid).startswith("tail -f") for pid in tree)
        if tails == 2 or (top and ready()):
            return tree
        await asyncio.sleep(0.01)
    raise TimeoutError("the run never got to the point to cancel")


async def main(repetitions: int, cancels: int, double_cancel: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="dsh-bench-cc-") as folder:
        await bench(Path(folder), repetitions, cancels, double_cancel)


async def bench(root: Path, repetitions: int, cancels: int, double_cancel: bool) -> None:
    work = root / "work"
    work.mkdir()
    with AnthropicMessagesServer() as server:
        server.when("BENCH-HELLO", "Hello from the fake model.")
        tool = MessagesReply(tool_uses=[ToolUse("Bash", {"command": BLOCKING, "description": "x"})])
        server.when("BENCH-BLOCK", tool, "unreachable")
        server.when("BENCH-STALL", MessagesReply(text="so far", faults=StreamFaults(hang_after=4)))
        env = claude_code_env(server.api_base, root / "cc")
        # The same environment for both: the SDK passes the CLI all of ours plus
        # options.env, so here the provider passes ours through too (by default it
        # passes only a credential-free allow-list).
        config = ClaudeCodeConfig(
            model=MODEL, env=env, allowed_tools=["Bash"], passthrough_env=sorted(os.environ)
        )
        # The same CLI flags as the provider's (its default system prompt is Claude Code's own).
        options = ClaudeAgentOptions(
            cwd=str(work),
            env=env,
            model=MODEL,
            permission_mode="dontAsk",
            allowed_tools=["Bash"],
            system_prompt={"type": "preset", "preset": "claude_code"},
        )
        async with Context.open(
            parse_preset('[agent.model]\nadapter = "scripted"\n'), cwd=work
        ) as ctx:
            runtime = SubagentRuntime.of(ctx)
            runtime.register_provider(ClaudeCodeProvider(config))
            parent = ctx.agents.create()

            async def ours(prompt: str = "BENCH-HELLO", sig: AbortSignal | None = None) -> str:
                request = SubagentStartRequest(prompt, parent, sig or AbortSignal())
                run = await runtime.start("claude-code", request)
                async with run:
                    result = await run.result
                assert result.stop_reason in ("completed", "aborted"), result
                return result.output

            async def bare(prompt: str = "BENCH-HELLO") -> str:
                out = ""
                async for message in query(prompt=prompt, options=options):
                    out = getattr(message, "result", None) or out
                return out

            # warm-up: SDK import, CLI binary in the page cache
            assert await ours() == await bare() == "Hello from the fake model."
            ours_s: list[float] = []
            bare_s: list[float] = []
            for index in range(repetitions):
                pair: list[tuple[list[float], Callable[[], Awaitable[str]]]] = [
                    (ours_s, ours),
                    (bare_s, bare),
                ]
                for samples, fn in pair if index % 2 == 0 else reversed(pair):
                    started = time.perf_counter()
                    await fn()
                    samples.append(time.perf_counter() - started)
            print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
            print(f"claude-code provider (start → result → dispose)  {stats(ours_s)}")
            print(f"bare claude_agent_sdk.query(), same flags/env     {stats(bare_s)}")
            ratio = statistics.median(ours_s) / statistics.median(bare_s)
            paired = statistics.median(o / b for o, b in zip(ours_s, bare_s, strict=True))
            print(f"overhead per delegation: {ratio:.3f}x ({(ratio - 1) * 100:+.1f} %)")
            print(f"median of per-pair ratios (drift cancelled): {paired:.3f}x")

            # -- cancel to tree gone ---------------------------------------------------
            for marker, what in (("BENCH-BLOCK", "mid-tool"), ("BENCH-STALL", "mid-stream")):
                ours_c: list[float] = []
                stock_c: list[float] = []

                seen = [0]  # requests for marker before this run

                def stalled(marker: str = marker, seen: list[int] = seen) -> bool:
                    return marker == "BENCH-STALL" and len(server.matching(marker)) > seen[0]

                for _ in range(cancels):
                    seen[0] = len(server.matching(marker))
                    before = live_children()
                    sig = AbortSignal()
                    task = asyncio.get_running_loop().create_task(ours(marker, sig))
                    tree = await tool_tree(lambda before=before: live_children() - before, stalled)
                    await asyncio.sleep(0.1)
                    sig.abort("bench cancel")
                    ours_c.append(await asyncio.to_thread(wait_until_gone, tree, 10.0))
                    await task

                    seen[0] = len(server.matching(marker))
                    before = live_children()
                    task = asyncio.get_running_loop().create_task(bare(marker))
                    tree = await tool_tree(lambda before=before: live_children() - before, stalled)
                    await asyncio.sleep(0.1)
                    task.cancel()
                    stock_c.append(await asyncio.to_thread(wait_until_gone, tree, 20.0))
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                print(f"cancel {what:10s} → tree gone, ours (abort signal) {stats(ours_c)}")
                print(f"cancel {what:10s} → tree gone, SDK's transport    {stats(stock_c)}")

            if double_cancel:
                before = live_children()
                task = asyncio.get_running_loop().create_task(bare("BENCH-BLOCK"))
                tree = await tool_tree(lambda before=before: live_children() - before, bool)
                task.cancel()
                await asyncio.sleep(0.05)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await asyncio.sleep(8)
                left = [pid for pid in tree if alive(pid)]
                print(
                    f"SDK's transport cancelled twice (50 ms apart): {len(left)} of {len(tree)}"
                    " processes still alive 8 s later"
                )
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--cancels", type=int, default=3)
    parser.add_argument("--double-cancel", action="store_true")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.repetitions, args.cancels, args.double_cancel)))
