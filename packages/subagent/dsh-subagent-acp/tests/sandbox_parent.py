"""A dsh process that delegates one prompt to an ``acp`` provider, in a sandbox.

Usage: python sandbox_parent.py CWD CONFIG_JSON PROMPT

``CONFIG_JSON`` is the provider row's config. The parent runs under the default
sandbox (``workspace-write``, network off) in ``CWD`` and prints one JSON line:
``{"stop": ..., "output": ..., "diagnostic": ...}``. The test gives this process a
secret in its environment, as a real parent has its API keys.
"""

from __future__ import annotations

import json
import sys

import anyio

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest


async def main() -> None:
    cwd, config, prompt = sys.argv[1:]
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    async with Context.open(preset, cwd=cwd) as ctx:
        await ctx.plugins.load("dsh-subagent-acp", json.loads(config))
        request = SubagentStartRequest(prompt, ctx.agents.create(), AbortSignal())
        run = await SubagentRuntime.of(ctx).start("acp", request)
        async with run:
            with anyio.fail_after(60):
                result = await run.result
    print(
        json.dumps(
            {"stop": result.stop_reason, "output": result.output, "diagnostic": result.diagnostic}
        ),
        flush=True,
    )


if __name__ == "__main__":
    anyio.run(main)
