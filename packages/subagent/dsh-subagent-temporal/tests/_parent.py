"""A parent dsh process for the crash tests (run as a script, not collected by pytest).

``python _parent.py start --address A --queue Q --journal J --count N``
    opens a context with a ``temporal`` provider (journal ``J``), starts N delegations
    at once (prompts ``slow job 0`` ...), prints ``{"runs": [run ids]}`` and waits for
    their results forever (the test kills it).

``python _parent.py collect --address A --queue Q --journal J``
    opens a new context with the same journal, reconnects to every delegation still
    outstanding, prints one ``{"run", "stop_reason", "output"}`` line per result and
    then ``{"outstanding_after": n}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_temporal import TemporalProvider, TemporalProviderConfig


def say(data: object) -> None:
    print(json.dumps(data), flush=True)


async def main(args: argparse.Namespace) -> None:
    config = TemporalProviderConfig(
        address=args.address,
        task_queue=args.queue,
        journal=args.journal,
        heartbeat_timeout=2.0,
        retry={"initial_interval": 0.2, "maximum_attempts": 5},
    )
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    async with Context.open(preset, cwd=Path.cwd()) as ctx:
        provider = TemporalProvider(config)
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(provider)
        parent = ctx.agents.create()
        if args.action == "start":
            requests = [
                SubagentStartRequest(f"slow job {n}", parent, AbortSignal(), label=f"job {n}")
                for n in range(args.count)
            ]
            runs = await asyncio.gather(*(runtime.start(provider.name, r) for r in requests))
            say({"runs": [run.id for run in runs]})
            await asyncio.gather(*(run.result for run in runs))
            await asyncio.sleep(3600)
            return
        outstanding = provider.outstanding(ctx)
        runs = [await provider.reconnect(entry["run"], parent) for entry in outstanding]

        async def collect(run: object) -> None:
            async with run:  # type: ignore[attr-defined]
                result = await run.result  # type: ignore[attr-defined]
            say({"run": run.id, "stop_reason": result.stop_reason, "output": result.output})  # type: ignore[attr-defined]

        await asyncio.gather(*(collect(run) for run in runs))
        say({"outstanding_after": len(provider.outstanding(ctx))})


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["start", "collect"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--count", type=int, default=4)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
