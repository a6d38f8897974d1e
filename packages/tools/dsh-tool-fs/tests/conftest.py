"""Fixtures: a working directory with files, a directory outside it, and a context
whose agents use the file tools there."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal, Agent, Context, ToolContext, ToolResult, parse_preset

BASE = '[agent.model]\nadapter = "scripted"\n'
FS_ROW = '\n[[plugin]]\nname = "dsh-tool-fs"\n'

Call = Callable[..., Awaitable[ToolResult]]


@dataclass
class Tree:
    """``work`` (the agent's cwd) and ``outside`` (next to it, never reachable)."""

    work: Path
    outside: Path


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    work = tmp_path / "work"
    outside = tmp_path / "outside"
    (work / "src" / "pkg").mkdir(parents=True)
    (work / "docs").mkdir()
    (work / ".git").mkdir()
    outside.mkdir()
    (work / "README.md").write_text("# Demo\n\nThe answer is 42.\n")
    (work / "src" / "main.py").write_text("import os\n\ndef main():\n    return 42\n")
    (work / "src" / "pkg" / "util.py").write_text("def helper():\n    return 'TODO: tidy'\n")
    (work / "docs" / "guide.md").write_text("Guide\nTODO: write more\n")
    (work / ".git" / "config").write_text("[core]\nTODO = hidden\n")
    (outside / "secret.txt").write_text("top secret\n")
    (outside / "dir").mkdir()
    (outside / "dir" / "inner.txt").write_text("inner secret\n")
    return Tree(work, outside)


@pytest.fixture
async def ctx(tree: Tree) -> AsyncIterator[Context]:
    """Every tool allowed (permissions have tests of their own)."""
    async with Context.open(parse_preset(BASE + FS_ROW), cwd=tree.work) as ctx:
        ctx.permissions.allow_all = True
        yield ctx


Invoke = Callable[..., Awaitable[ToolResult]]


@pytest.fixture
def invoke() -> Invoke:
    """``await invoke(agent, name, **arguments)``: call a tool the way the agent loop
    does (argument validation and the permission check included)."""

    async def invoke(agent: Agent, name: str, **arguments: Any) -> ToolResult:
        tool = agent.tools.get(name)
        assert tool is not None, f"agent {agent.id} has no tool {name}"
        return await tool.invoke(arguments, ToolContext(agent, "call-1", AbortSignal()))

    return invoke


@pytest.fixture
def call(ctx: Context, invoke: Invoke) -> Call:
    """``await call(name, **arguments)`` as a root agent of ``ctx``."""
    agent = ctx.agents.create()

    async def call(name: str, **arguments: Any) -> ToolResult:
        return await invoke(agent, name, **arguments)

    return call
