"""stdio MCP servers run in the OS sandbox: their own PID namespace (dsh's processes and
their environment out of sight), the workspace as the only writable place, no network,
and nothing left behind when they stop."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Context, ToolContext, parse_preset
from dsh.core.plugins import PluginError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def preset(sandbox: str = "", server: str = "") -> str:
    table = f"[sandbox]\n{sandbox}\n" if sandbox else ""
    return (
        '[agent.model]\nadapter = "scripted"\n' + table + '[[plugin]]\nname = "dsh-tool-mcp"\n'
        f'config = {{ servers = [{{ name = "calc", command = "{sys.executable}",'
        f' args = ["-m", "dsh.testing.mcp_server"], permission = "allow"{server} }}] }}\n'
    )


async def call(ctx: Context, name: str, arguments: dict[str, Any] | None = None) -> str:
    tool = ctx.tools.get(name)
    assert tool is not None
    result = await tool.invoke(
        arguments or {}, ToolContext(ctx.agents.create(), "c", AbortSignal())
    )
    assert isinstance(result.content, str)
    return result.content


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


async def test_a_server_lives_in_its_own_pid_namespace_and_dies_whole(tmp_path: Path) -> None:
    async with Context.open(parse_preset(preset()), cwd=tmp_path) as ctx:
        # pid 1 is the sandbox's init: the server cannot see (or read) dsh's processes
        assert int(await call(ctx, "calc__pid")) <= 3
        inner = int(await call(ctx, "calc__spawn_sleeper", {"detach": True}))
        assert inner <= 10
        environ = await call(ctx, "calc__env", {"name": "DSH_SANDBOX"})
        assert '"mode":"workspace-write"' in environ
        sleepers = processes_with("time.sleep(600)")
        assert sleepers  # seen from outside, with its real pid
    with anyio.fail_after(10):
        while set(processes_with("time.sleep(600)")) & set(sleepers):
            await anyio.sleep(0.05)


async def test_a_row_cannot_give_a_server_the_network(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="network = true"):
        async with Context.open(
            parse_preset(preset(server=", sandbox = { network = true }")), cwd=tmp_path
        ):
            pass
    # allowed when the preset's [sandbox] has the network
    async with Context.open(
        parse_preset(preset("network = true", ", sandbox = { network = true }")), cwd=tmp_path
    ) as ctx:
        assert await call(ctx, "calc__add", {"a": 1, "b": 2}) == "3"


async def test_off_is_explicit(tmp_path: Path) -> None:
    async with Context.open(parse_preset(preset('mode = "off"')), cwd=tmp_path) as ctx:
        assert int(await call(ctx, "calc__pid")) > 3
        assert await call(ctx, "calc__env", {"name": "DSH_SANDBOX"}) == "<unset>"
