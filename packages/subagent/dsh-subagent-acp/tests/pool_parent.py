"""A dsh process with a warm ACP pool, one run holding a process, then idle forever.

Usage: python pool_parent.py CWD AGENT_SCRIPT

Prints one JSON line ``{"idle": [pids], "held": pid}`` once the pool (size 3) is
warm and a ``hang`` run holds one of its processes; the test then SIGKILLs us.
"""

from __future__ import annotations

import json
import sys

import anyio

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_acp import AcpProvider, AcpProviderConfig


async def main() -> None:
    cwd, agent = sys.argv[1:]
    config = AcpProviderConfig(
        name="acp", command=sys.executable, args=[agent], pool={"size": 3, "idle_timeout": 0}
    )
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    async with Context.open(preset, cwd=cwd) as ctx:
        provider = AcpProvider(config)
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(provider)
        pool = provider.pool(ctx)
        assert pool is not None
        await pool.wait_ready()
        warm = pool.pids()
        parent = ctx.agents.create()
        await runtime.start("acp", SubagentStartRequest("hang", parent, AbortSignal()))
        idle = pool.pids()
        (held,) = warm - idle
        print(json.dumps({"idle": sorted(idle), "held": held}), flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main)
