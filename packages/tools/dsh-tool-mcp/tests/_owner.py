"""A dsh process with an MCP server (run by test_sigkill.py): loads dsh-tool-mcp with
the test kit's server, has it start a detached helper, prints the pids as JSON, and
waits to be killed."""

from __future__ import annotations

import json
import sys

import anyio

from dsh.core import AbortSignal, Context, ToolContext, parse_preset
from dsh.subprocess import watchdog


async def main() -> None:
    async with Context.open(
        parse_preset('[agent.model]\nadapter = "scripted"\n[sandbox]\nmode = "off"\n')
    ) as ctx:
        server = {
            "name": "calc",
            "command": sys.executable,
            "args": ["-m", "dsh.testing.mcp_server"],
        }
        await ctx.plugins.load("dsh-tool-mcp", {"servers": [{**server, "permission": "allow"}]})
        agent = ctx.agents.create()

        async def call(name: str, arguments: dict[str, object]) -> int:
            tool = ctx.tools.get(name)
            assert tool is not None
            result = await tool.invoke(arguments, ToolContext(agent, "c", AbortSignal()))
            return int(str(result.content))

        info = {
            "server": await call("calc__pid", {}),
            "helper": await call("calc__spawn_sleeper", {"detach": True}),
            "watchdog": watchdog().pid,
        }
        print(json.dumps(info), flush=True)
        await anyio.sleep(600)


if __name__ == "__main__":
    anyio.run(main)
