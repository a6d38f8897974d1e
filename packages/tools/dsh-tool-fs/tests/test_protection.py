"""The model cannot rewrite its own rules, nor reach out through links and special
files: writes to `.git`, `.dsh` and the preset are refused (unless a row allows a path),
the sandbox on a row narrows writes, hard-linked files are neither read nor written, a
write replaces the file through a rename, and FIFOs never block a tool."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import (
    AbortSignal,
    Context,
    ScriptedAdapter,
    ScriptedReply,
    ToolContext,
    ToolResult,
    load_preset,
    parse_preset,
)
from dsh.core.models import BoundModel
from dsh.core.plugins import PluginError
from dsh.testing.scripting import call as tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

BASE = '[agent.model]\nadapter = "scripted"\n'


def failed(result: ToolResult) -> str:
    assert result.is_error, result.content
    assert isinstance(result.content, str)
    return result.content


def ok(result: ToolResult) -> str:
    assert not result.is_error, result.content
    assert isinstance(result.content, str)
    return result.content


async def run_tool(ctx: Context, name: str, **arguments: Any) -> ToolResult:
    ctx.permissions.allow_all = True
    tool = ctx.tools.get(name)
    assert tool is not None
    return await tool.invoke(arguments, ToolContext(ctx.agents.create(), "c", AbortSignal()))


def fs_preset(row: str = "", sandbox: str = "") -> str:
    table = f"\n[sandbox]\n{sandbox}\n" if sandbox else ""
    config = f"config = {{ {row} }}\n" if row else ""
    return BASE + table + '\n[[plugin]]\nname = "dsh-tool-fs"\n' + config


def writes(path: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("write_file", {"path": path, "content": "pwned\n"}),
        ("edit_file", {"path": path, "old_string": "original", "new_string": "pwned"}),
    ]


# -- protected paths -----------------------------------------------------------------------


@pytest.mark.parametrize("path", [".git/config", ".git/hooks/pre-commit", ".dsh/x"])
@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
async def test_git_and_dsh_are_protected(call: Any, tree: Any, path: str, tool: str) -> None:
    target = tree.work / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("original\n")
    arguments = dict(writes(path))[tool]
    message = failed(await call(tool, **arguments))
    top = path.split("/")[0]
    assert f'writing "{path}" is refused: {top}/ is protected' in message
    assert "allow_write" in message
    assert target.read_text() == "original\n"
    assert ok(await call("read_file", path=path)) == "original"  # reading stays allowed


async def test_a_protected_file_that_does_not_exist_is_not_created(call: Any, tree: Any) -> None:
    message = failed(await call("write_file", path=".dsh/state/new.json", content="{}"))
    assert ".dsh/ is protected" in message
    assert not (tree.work / ".dsh").exists()
    # a symlink with an innocent name does not get around it
    os.symlink(".git/config", tree.work / "innocent.txt")
    message = failed(await call("write_file", path="innocent.txt", content="[core]\n"))
    assert ".git/ is protected" in message
    assert (tree.work / ".git" / "config").read_text() == "[core]\nTODO = hidden\n"


async def test_the_preset_files_the_context_loaded_are_protected(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text(BASE + "# original\n")
    (tmp_path / "dsh.toml").write_text(
        'extends = "base.toml"\n\n[[plugin]]\nname = "dsh-tool-fs"\n# original\n'
    )
    preset = load_preset(tmp_path / "dsh.toml")
    async with Context.open(preset, cwd=tmp_path) as ctx:
        for name in ("dsh.toml", "base.toml"):
            before = (tmp_path / name).read_text()
            for tool, arguments in writes(name):
                message = failed(await run_tool(ctx, tool, **arguments))
                assert f'writing "{name}" is refused: it is a preset file dsh loaded' in message
            assert (tmp_path / name).read_text() == before
        ok(await run_tool(ctx, "write_file", path="other.toml", content="x = 1\n"))


async def test_allow_write_allows_exactly_what_it_lists(tree: Any) -> None:
    hook = tree.work / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(parents=True)
    preset = fs_preset('allow_write = [".git/hooks/pre-commit"]')
    async with Context.open(parse_preset(preset), cwd=tree.work) as ctx:
        ok(await run_tool(ctx, "write_file", path=".git/hooks/pre-commit", content="#!/bin/sh\n"))
        assert hook.read_text() == "#!/bin/sh\n"
        message = failed(await run_tool(ctx, "write_file", path=".git/config", content="x"))
        assert ".git/ is protected" in message
        failed(await run_tool(ctx, "write_file", path=".git/hooks/post-merge", content="x"))


async def test_a_read_only_sandbox_on_the_row_refuses_every_write(tree: Any) -> None:
    preset = fs_preset('sandbox = { mode = "read-only" }')
    async with Context.open(parse_preset(preset), cwd=tree.work) as ctx:
        for tool, arguments in writes("README.md"):
            message = failed(await run_tool(ctx, tool, **arguments))
            assert 'writing "README.md" is refused: the sandbox is read-only' in message
        assert ok(await run_tool(ctx, "read_file", path="README.md")).startswith("# Demo")
    assert (tree.work / "README.md").read_text() == "# Demo\n\nThe answer is 42.\n"


async def test_the_preset_sandbox_applies_to_the_file_tools(tree: Any) -> None:
    preset = fs_preset(sandbox='mode = "read-only"')
    async with Context.open(parse_preset(preset), cwd=tree.work) as ctx:
        message = failed(await run_tool(ctx, "write_file", path="new.txt", content="x"))
        assert "the sandbox is read-only" in message
    assert not (tree.work / "new.txt").exists()


@pytest.mark.parametrize(
    ("sandbox", "row", "problem"),
    [
        ("", "sandbox = { network = true }", "network = true"),
        ('mode = "read-only"', 'sandbox = { mode = "workspace-write" }', "wider"),
    ],
)
async def test_a_row_cannot_widen_the_sandbox(
    tmp_path: Path, sandbox: str, row: str, problem: str
) -> None:
    with pytest.raises(PluginError, match=problem):
        async with Context.open(parse_preset(fs_preset(row, sandbox)), cwd=tmp_path):
            pass


async def test_the_model_is_told_why_in_the_agent_loop(tree: Any) -> None:
    async with Context.open(parse_preset(fs_preset()), cwd=tree.work) as ctx:
        ctx.permissions.allow_all = True
        model = BoundModel(
            ScriptedAdapter(
                [
                    ScriptedReply(
                        tool_calls=[
                            tool_call(
                                "edit_file",
                                path=".git/config",
                                old_string="[core]",
                                new_string='[core]\nfsmonitor = "touch pwned"',
                            )
                        ]
                    ),
                    ScriptedReply(text="saw: {tool_results}"),
                ]
            )
        )
        agent = ctx.agents.create(model=model)
        await agent.run("make git faster")
        (result,) = [e.data for e in agent.session.events if e.type == "tool/result"]
        assert result["is_error"]
        assert ".git/ is protected" in result["content"][0]["text"]
    assert "fsmonitor" not in (tree.work / ".git" / "config").read_text()


# -- hard links and renames ----------------------------------------------------------------


async def test_a_hard_link_to_a_file_outside_is_neither_read_nor_written(
    call: Any, tree: Any
) -> None:
    os.link(tree.outside / "secret.txt", tree.work / "notes.txt")
    for tool, arguments in [
        ("read_file", {"path": "notes.txt"}),
        ("grep", {"pattern": "secret", "path": "notes.txt"}),
        ("write_file", {"path": "notes.txt", "content": "pwned\n"}),
        ("edit_file", {"path": "notes.txt", "old_string": "top", "new_string": "pwned"}),
    ]:
        message = failed(await call(tool, **arguments))
        assert '"notes.txt" has 2 hard links; dsh does not read or write through hard' in message
        assert "top secret" not in message
    found = ok(await call("grep", pattern="secret"))
    assert "top secret" not in found
    assert "several hard links" in found
    assert "notes.txt" in found
    assert (tree.outside / "secret.txt").read_text() == "top secret\n"
    assert os.stat(tree.outside / "secret.txt").st_nlink == 2


async def test_a_write_replaces_the_file_and_never_truncates_its_inode(
    call: Any, tree: Any
) -> None:
    readme = tree.work / "README.md"
    readme.chmod(0o640)
    os.symlink("README.md", tree.work / "link.md")
    with open(readme, "rb") as held:  # another reader of the old inode
        old_inode = os.fstat(held.fileno()).st_ino
        ok(await call("write_file", path="link.md", content="new text\n"))
        assert held.read() == b"# Demo\n\nThe answer is 42.\n"
    assert readme.read_text() == "new text\n"
    assert os.stat(readme).st_ino != old_inode
    assert stat.S_IMODE(os.stat(readme).st_mode) == 0o640
    assert os.path.islink(tree.work / "link.md")
    with open(readme, "rb") as held:
        ok(await call("edit_file", path="README.md", old_string="new", new_string="edited"))
        assert held.read() == b"new text\n"
    assert readme.read_text() == "edited text\n"
    assert stat.S_IMODE(os.stat(readme).st_mode) == 0o640
    assert sorted(p.name for p in tree.work.iterdir() if "dsh-tmp" in p.name) == []
    # a new file gets what open() would give it
    ok(await call("write_file", path="fresh.txt", content="x"))
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(tree.work / "fresh.txt").st_mode) == 0o666 & ~mask


# -- special files -------------------------------------------------------------------------


@pytest.fixture
def fifo(tree: Any) -> Iterator[Path]:
    """A FIFO in the working directory (nobody writes to it). Afterwards it is opened
    for writing once, so that an open() a broken tool left blocked returns."""
    path = tree.work / "src" / "pipe"
    os.mkfifo(path)
    yield path
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    os.close(fd)


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_file", {"path": "src/pipe"}),
        ("grep", {"pattern": "x", "path": "src/pipe"}),
        ("write_file", {"path": "src/pipe", "content": "x"}),
        ("edit_file", {"path": "src/pipe", "old_string": "x", "new_string": "y"}),
    ],
)
async def test_a_fifo_is_refused_at_once(
    call: Any, fifo: Path, tool: str, arguments: dict[str, Any]
) -> None:
    with anyio.fail_after(10):
        message = failed(await call(tool, **arguments))
    assert '"src/pipe" is a FIFO (named pipe); dsh\'s file tools' in message
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


async def test_walks_skip_fifos(call: Any, fifo: Path) -> None:
    with anyio.fail_after(10):
        found = ok(await call("grep", pattern="def", path="src"))
        listed = ok(await call("glob", pattern="**/*"))
        near = ok(await call("glob", pattern="src/p*"))
    assert "src/main.py:3:def main():" in found
    assert "pipe" not in found
    assert "src/pipe" not in listed.splitlines()
    assert "src/main.py" in listed.splitlines()
    assert near.splitlines() == ["src/pkg/"]
