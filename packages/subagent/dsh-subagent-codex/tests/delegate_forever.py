"""Start one codex run in a fresh process and then wait forever (the test kills us).

Usage: python delegate_forever.py CONFIG_JSON CWD PROMPT
Prints ``published`` once the run is published.
"""

from __future__ import annotations

import json
import sys

import anyio

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_codex import CodexConfig, CodexProvider


async def main() -> None:
    config_path, cwd, prompt = sys.argv[1:]
    with open(config_path, encoding="utf-8") as handle:
        config = CodexConfig(**json.load(handle))
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n')
    async with Context.open(preset, cwd=cwd) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(CodexProvider(config))
        parent = ctx.agents.create()
        await runtime.start("codex", SubagentStartRequest(prompt, parent, AbortSignal()))
        print("published", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main)
