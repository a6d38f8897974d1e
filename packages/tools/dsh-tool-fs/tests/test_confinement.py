"""Every file tool is confined to the agent's cwd: `..`, absolute paths and symlinks
that lead outside are refused with a message naming the path and the root."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.core import ToolResult

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

Call = Callable[..., Awaitable[ToolResult]]


def arguments_for(tool: str, path: str) -> dict[str, Any]:
    return {
        "read_file": {"path": path},
        "list_dir": {"path": path},
        "glob": {"pattern": "*", "path": path},
        "grep": {"pattern": "secret", "path": path},
        "write_file": {"path": path, "content": "pwned"},
        "edit_file": {"path": path, "old_string": "secret", "new_string": "pwned"},
    }[tool]


TOOLS = ["read_file", "list_dir", "glob", "grep", "write_file", "edit_file"]
FILE_TOOLS = ["read_file", "grep", "write_file", "edit_file"]
DIR_TOOLS = ["list_dir", "glob", "grep"]


def outside_untouched(tree: Any) -> None:
    assert (tree.outside / "secret.txt").read_text() == "top secret\n"
    assert (tree.outside / "dir" / "inner.txt").read_text() == "inner secret\n"
    assert sorted(p.name for p in tree.outside.iterdir()) == ["dir", "secret.txt"]


async def refused(call: Call, tool: str, path: str, work: Path) -> str:
    result = await call(tool, **arguments_for(tool, path))
    assert result.is_error, f"{tool}({path!r}) was not refused: {result.content}"
    message = str(result.content)
    assert f'path "{path}" is refused' in message
    assert str(work) in message
    assert "secret" not in message.replace(path, "").replace("secret.txt", "")
    return message


@pytest.mark.parametrize("tool", FILE_TOOLS)
@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "src/../../outside/secret.txt",
        "src/pkg/../../../outside/secret.txt",
    ],
)
async def test_dot_dot_escapes_are_refused(call: Call, tree: Any, tool: str, path: str) -> None:
    message = await refused(call, tool, path, tree.work)
    assert "outside the working directory" in message
    outside_untouched(tree)


@pytest.mark.parametrize("tool", DIR_TOOLS)
async def test_dot_dot_directories_are_refused(call: Call, tree: Any, tool: str) -> None:
    await refused(call, tool, "..", tree.work)
    await refused(call, tool, "../outside", tree.work)


@pytest.mark.parametrize("tool", TOOLS)
async def test_absolute_paths_outside_are_refused(call: Call, tree: Any, tool: str) -> None:
    target = tree.outside / ("dir" if tool in ("list_dir", "glob") else "secret.txt")
    await refused(call, tool, str(target), tree.work)
    await refused(call, tool, "/", tree.work)
    outside_untouched(tree)


@pytest.mark.parametrize("tool", FILE_TOOLS)
async def test_symlinked_file_pointing_out_is_refused(call: Call, tree: Any, tool: str) -> None:
    os.symlink(tree.outside / "secret.txt", tree.work / "leak.txt")
    message = await refused(call, tool, "leak.txt", tree.work)
    assert "through a symlink" in message
    outside_untouched(tree)


@pytest.mark.parametrize("tool", TOOLS)
async def test_symlinked_directory_pointing_out_is_refused(
    call: Call, tree: Any, tool: str
) -> None:
    os.symlink(tree.outside / "dir", tree.work / "linkdir")
    path = "linkdir" if tool in ("list_dir", "glob") else "linkdir/inner.txt"
    message = await refused(call, tool, path, tree.work)
    assert "through a symlink" in message
    outside_untouched(tree)


async def test_relative_symlink_out_and_symlink_chains_are_refused(call: Call, tree: Any) -> None:
    os.symlink("../outside/secret.txt", tree.work / "rel-leak")
    os.symlink("rel-leak", tree.work / "chain")
    (tree.work / "src" / "deep").symlink_to("../../outside", target_is_directory=True)
    await refused(call, "read_file", "rel-leak", tree.work)
    await refused(call, "read_file", "chain", tree.work)
    await refused(call, "read_file", "src/deep/secret.txt", tree.work)
    await refused(call, "list_dir", "src/deep", tree.work)


async def test_dangling_symlink_pointing_out_is_not_written_through(call: Call, tree: Any) -> None:
    os.symlink(tree.outside / "planted.txt", tree.work / "trap.txt")
    await refused(call, "write_file", "trap.txt", tree.work)
    assert not (tree.outside / "planted.txt").exists()
    os.symlink(tree.outside / "newdir", tree.work / "trapdir")
    await refused(call, "write_file", "trapdir/file.txt", tree.work)
    assert not (tree.outside / "newdir").exists()
    outside_untouched(tree)


async def test_reads_inside_are_allowed_however_they_are_spelled(call: Call, tree: Any) -> None:
    expected = "# Demo\n\nThe answer is 42."
    os.symlink("README.md", tree.work / "alias.md")
    os.symlink(tree.work / "src", tree.work / "code")
    for path in (
        "README.md",
        "./README.md",
        "src/../README.md",
        str(tree.work / "README.md"),
        "alias.md",
    ):
        result = await call("read_file", path=path)
        assert not result.is_error, (path, result.content)
        assert result.content == expected
    through_link = await call("read_file", path="code/main.py")
    assert not through_link.is_error
    assert "def main" in str(through_link.content)
    assert not (await call("list_dir", path=str(tree.work))).is_error
    assert not (await call("list_dir", path="code")).is_error
    written = await call("write_file", path="code/new.py", content="x = 1\n")
    assert not written.is_error
    assert written.content == "Wrote 6 bytes to src/new.py (new file)"  # named by its real path


async def test_walks_do_not_follow_links_out(call: Call, tree: Any) -> None:
    os.symlink(tree.outside / "dir", tree.work / "linkdir")
    os.symlink(tree.outside / "secret.txt", tree.work / "leak.txt")
    os.symlink(tree.work / "docs", tree.work / "docs-link")  # inside: listed, not walked twice
    found = str((await call("grep", pattern="secret|TODO")).content)
    assert "secret" not in found
    assert "docs/guide.md:2:TODO: write more" in found
    assert "docs-link" not in found
    paths = str((await call("glob", pattern="**/*")).content).splitlines()
    assert "linkdir/" not in paths
    assert "leak.txt" not in paths
    assert not any(p.startswith("linkdir/") for p in paths)
    assert "docs-link/" in paths
    assert [p for p in paths if p.startswith("docs-link")] == ["docs-link/"]
    listing = str((await call("list_dir")).content)
    assert f"linkdir -> {tree.outside / 'dir'}" in listing  # the link itself is inside: shown
