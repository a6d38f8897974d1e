"""What each file tool does, through the real plugin loader and Tool.invoke."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal, Context, ToolContext, ToolResult, parse_preset
from dsh.core.plugins import PluginError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

Call = Callable[..., Awaitable[ToolResult]]
BASE = '[agent.model]\nadapter = "scripted"\n'


def ok(result: ToolResult) -> str:
    assert not result.is_error, result.content
    assert isinstance(result.content, str)
    return result.content


def failed(result: ToolResult) -> str:
    assert result.is_error, result.content
    assert isinstance(result.content, str)
    return result.content


def context_with(work: Path, config: dict[str, Any]) -> AbstractAsyncContextManager[Context]:
    """A context (every tool allowed) with one dsh-tool-fs row configured by ``config``."""
    rows = '\n[[plugin]]\nname = "dsh-tool-fs"\nconfig = ' + _inline(config) + "\n"
    return Context.open(parse_preset(BASE + rows), cwd=work)


async def run_tool(ctx: Context, name: str, **arguments: Any) -> ToolResult:
    """Call ``name`` as a new root agent of ``ctx``, with every tool allowed."""
    ctx.permissions.allow_all = True
    tool = ctx.tools.get(name)
    assert tool is not None
    return await tool.invoke(arguments, ToolContext(ctx.agents.create(), "c", AbortSignal()))


def _inline(config: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return str(v)

    return "{ " + ", ".join(f"{k} = {value(v)}" for k, v in config.items()) + " }"


# -- registration ---------------------------------------------------------------------------


async def test_plugin_registers_six_tools_with_permissions_kinds_and_titles(ctx: Context) -> None:
    expected = {
        "read_file": ("allow", "read", {"path": "README.md"}, "Read README.md"),
        "list_dir": ("allow", "read", {"path": "src"}, "List src"),
        "glob": ("allow", "search", {"pattern": "**/*.py"}, "Find **/*.py"),
        "grep": ("allow", "search", {"pattern": "TODO", "path": "src"}, "Search for /TODO/ in src"),
        "write_file": ("ask", "edit", {"path": "notes.txt", "content": "x"}, "Write notes.txt"),
        "edit_file": (
            "ask",
            "edit",
            {"path": "notes.txt", "old_string": "a", "new_string": "b"},
            "Edit notes.txt",
        ),
    }
    assert ctx.tools.names() == list(expected)
    for name, (permission, kind, arguments, title) in expected.items():
        tool = ctx.tools.get(name)
        assert tool is not None
        assert tool.permission == permission
        assert tool.kind == kind
        assert tool.title_for(tool.parse(arguments)) == title
        assert tool.spec.parameters["additionalProperties"] is False
    write_file = ctx.tools.get("write_file")
    assert write_file is not None
    assert not write_file.concurrency_safe
    read_file = ctx.tools.get("read_file")
    assert read_file is not None
    assert read_file.concurrency_safe
    assert read_file.title_for(read_file.parse({"path": "a", "offset": 40})) == (
        "Read a from line 40"
    )
    list_dir = ctx.tools.get("list_dir")
    assert list_dir is not None
    assert list_dir.title_for(list_dir.parse({})) == "List the working directory"


async def test_a_cancelled_call_does_nothing(ctx: Context, tree: Any) -> None:
    agent = ctx.agents.create()
    signal = AbortSignal()
    signal.abort("the user pressed stop")
    for name, arguments in [
        ("read_file", {"path": "README.md"}),
        ("write_file", {"path": "late.txt", "content": "x"}),
    ]:
        tool = ctx.tools.get(name)
        assert tool is not None
        result = await tool.invoke(arguments, ToolContext(agent, "c", signal))
        assert failed(result) == "cancelled: the user pressed stop"
    assert not (tree.work / "late.txt").exists()


def test_walks_stop_when_the_call_is_cancelled(tree: Any) -> None:
    from dsh.tool_fs._ops import Limits, Stopped, glob_paths, grep
    from dsh.tool_fs._paths import Root

    limits = Limits(1000, 100, 10000, 100, 100, frozenset())
    checks = 0

    def check() -> None:
        nonlocal checks
        checks += 1
        if checks > 1:
            raise Stopped

    with pytest.raises(Stopped):
        glob_paths(Root(str(tree.work)), "**/*", ".", limits, check)
    checks = 0
    with pytest.raises(Stopped):
        grep(Root(str(tree.work)), "x", ".", None, False, None, limits, check)


async def test_tools_subset_and_prefix(tmp_path: Path) -> None:
    async with context_with(tmp_path, {"tools": ["read_file", "grep"], "prefix": "fs_"}) as ctx:
        assert ctx.tools.names() == ["fs_read_file", "fs_grep"]


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"root": "relative/dir"}, "root must be an absolute path"),
        ({"tools": ["read_file", "rm_rf"]}, "tools"),
        ({"tools": ["grep", "grep"]}, "tools lists grep more than once"),
        ({"max_read_bytes": 0}, "max_read_bytes"),
        ({"prefix": "bad prefix"}, "prefix"),
        ({"colour": "blue"}, "colour"),
    ],
)
async def test_bad_config_fails_the_load_naming_the_row(
    tmp_path: Path, config: dict[str, Any], problem: str
) -> None:
    with pytest.raises(PluginError) as caught:
        async with context_with(tmp_path, config):
            pass
    message = str(caught.value)
    assert 'plugin "dsh-tool-fs"' in message
    assert problem in message


async def test_configured_root_must_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(PluginError, match=r"nowhere.*does not exist"):
        async with context_with(tmp_path, {"root": str(missing)}):
            pass


async def test_two_rows_with_the_same_tool_names_fail_loud(tmp_path: Path) -> None:
    preset = (
        BASE + '[[plugin]]\nname = "dsh-tool-fs"\n[[plugin]]\nid = "again"\nname = "dsh-tool-fs"\n'
    )
    with pytest.raises(PluginError, match=r"row 2 .*already registered"):
        async with Context.open(parse_preset(preset), cwd=tmp_path):
            pass


async def test_configured_root_replaces_the_agent_cwd(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "only-here.txt").write_text("from the configured root\n")
    async with context_with(tmp_path, {"root": str(other)}) as ctx:
        result = await run_tool(ctx, "read_file", path="only-here.txt")
        assert ok(result) == "from the configured root"


# -- read_file ------------------------------------------------------------------------------


async def test_read_file_returns_the_text(call: Call) -> None:
    assert ok(await call("read_file", path="README.md")) == "# Demo\n\nThe answer is 42."
    assert ok(await call("read_file", path="src/main.py")).startswith("import os\n")


async def test_read_file_offset_and_limit(call: Call, tmp_path: Path) -> None:
    lines = "".join(f"line {n}\n" for n in range(1, 101))
    (tmp_path / "work" / "long.txt").write_text(lines)
    out = ok(await call("read_file", path="long.txt", offset=10, limit=3))
    assert out.splitlines()[:3] == ["line 10", "line 11", "line 12"]
    assert "[truncated: showed lines 10-12" in out
    assert "offset=13" in out
    tail = ok(await call("read_file", path="long.txt", offset=99))
    assert tail == "line 99\nline 100"


async def test_read_file_line_cap_and_byte_cap(tmp_path: Path) -> None:
    work = tmp_path
    (work / "big.txt").write_text("".join(f"{n:04d} {'x' * 44}\n" for n in range(1, 1001)))
    async with context_with(work, {"max_read_bytes": 1000, "max_read_lines": 5}) as ctx:
        by_lines = ok(await run_tool(ctx, "read_file", path="big.txt"))
        assert by_lines.splitlines()[4].startswith("0005 ")
        assert "a limit of 5 lines" in by_lines
        assert "offset=6" in by_lines
        asked_more = ok(await run_tool(ctx, "read_file", path="big.txt", limit=500))
        assert len(asked_more.splitlines()) == 6  # capped by max_read_lines, plus the marker
    async with context_with(work, {"max_read_bytes": 1000}) as ctx:
        result = ok(await run_tool(ctx, "read_file", path="big.txt"))
        shown = result.splitlines()[:-1]
        assert len(shown) == 20  # 20 whole lines of 50 bytes fit in 1000 bytes
        assert "[truncated: showed lines 1-20 (a limit of 1000 bytes per call)" in result
        assert "offset=21" in result
        assert len(result.encode()) < 1200


async def test_read_file_data_is_the_exact_text_and_says_whether_the_caps_cut_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "ends.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "empty.txt").write_text("")
    async with context_with(tmp_path, {"max_read_lines": 2}) as ctx:
        whole = await run_tool(ctx, "read_file", path="ends.txt", limit=2)
        assert whole.data == {"text": "one\ntwo\n", "complete": True}  # no marker, ends kept
        cut = await run_tool(ctx, "read_file", path="ends.txt")  # the cap, not the caller
        assert cut.data == {"text": "one\ntwo\n", "complete": False}
        rest = await run_tool(ctx, "read_file", path="ends.txt", offset=3)
        assert rest.data == {"text": "three\n", "complete": True}
        empty = await run_tool(ctx, "read_file", path="empty.txt")
        assert empty.data == {"text": "", "complete": True}
        assert ok(empty) == "(the file is empty)"


async def test_read_file_one_line_longer_than_the_cap(tmp_path: Path) -> None:
    (tmp_path / "minified.js").write_text("é" * 3000 + "\nnext\n")
    async with context_with(tmp_path, {"max_read_bytes": 1001}) as ctx:
        out = ok(await run_tool(ctx, "read_file", path="minified.js"))
        first, marker = out.split("\n")
        assert first == "é" * 500  # cut on a character boundary
        assert "line 1 is longer than 1001 bytes" in marker
        assert "offset=2" in marker


async def test_read_file_errors(call: Call, tree: Any) -> None:
    (tree.work / "empty.txt").write_text("")
    (tree.work / "blob.bin").write_bytes(b"\x89PNG\x00\x01\x02")
    (tree.work / "three.txt").write_text("a\nb\nc")
    assert ok(await call("read_file", path="empty.txt")) == "(the file is empty)"
    assert "does not exist" in failed(await call("read_file", path="nope.txt"))
    assert '"nope.txt"' in failed(await call("read_file", path="nope.txt"))
    assert "is a directory" in failed(await call("read_file", path="src"))
    assert "binary" in failed(await call("read_file", path="blob.bin"))
    past = failed(await call("read_file", path="three.txt", offset=9))
    assert "offset 9 is past the end" in past
    assert "which has 3 lines" in past
    invalid = failed(await call("read_file", path="README.md", offset=0))
    assert "invalid arguments for tool read_file" in invalid
    unknown = failed(await call("read_file", path="README.md", lines=3))
    assert "lines" in unknown


# -- list_dir -------------------------------------------------------------------------------


async def test_list_dir(call: Call, tree: Any) -> None:
    os.symlink("README.md", tree.work / "link.md")
    listing = ok(await call("list_dir"))
    assert listing.splitlines() == [
        ".git/",
        "README.md",
        "docs/",
        "link.md -> README.md",
        "src/",
    ]
    assert ok(await call("list_dir", path="src")).splitlines() == ["main.py", "pkg/"]
    (tree.work / "void").mkdir()
    assert ok(await call("list_dir", path="void")) == "(empty directory)"
    assert "is not a directory" in failed(await call("list_dir", path="README.md"))


async def test_list_dir_is_capped(tmp_path: Path) -> None:
    for n in range(30):
        (tmp_path / f"f{n:02d}").write_text("")
    async with context_with(tmp_path, {"max_results": 10}) as ctx:
        out = ok(await run_tool(ctx, "list_dir"))
        lines = out.splitlines()
        assert lines[:10] == [f"f{n:02d}" for n in range(10)]
        assert lines[10] == "[truncated: showed 10 of 30 entries; use glob to narrow down]"


# -- glob -----------------------------------------------------------------------------------


async def test_glob_patterns(call: Call, tree: Any) -> None:
    (tree.work / "src" / "app.ts").write_text("")
    (tree.work / "src" / "view.tsx").write_text("")
    assert ok(await call("glob", pattern="**/*.py")).splitlines() == [
        "src/main.py",
        "src/pkg/util.py",
    ]
    assert "no paths match" in ok(await call("glob", pattern="*.py"))  # top level only
    assert ok(await call("glob", pattern="src/*.{ts,tsx}")).splitlines() == [
        "src/app.ts",
        "src/view.tsx",
    ]
    assert ok(await call("glob", pattern="*.py", path="src/pkg")) == "src/pkg/util.py"
    assert ok(await call("glob", pattern="*")).splitlines() == [
        ".git/",
        "README.md",
        "docs/",
        "src/",
    ]
    assert ok(await call("glob", pattern="src/**")).splitlines() == [
        "src/app.ts",
        "src/main.py",
        "src/pkg/",
        "src/pkg/util.py",
        "src/view.tsx",
    ]


async def test_glob_skips_dirs_unless_searched_directly(call: Call) -> None:
    assert ok(await call("glob", pattern="**/config")) == (
        'no paths match "**/config" in the working directory'
    )
    assert ok(await call("glob", pattern="config", path=".git")) == ".git/config"


async def test_glob_refuses_escaping_patterns(call: Call) -> None:
    assert "contains" in failed(await call("glob", pattern="../*"))
    assert "absolute" in failed(await call("glob", pattern="/etc/*"))


async def test_glob_is_capped(tmp_path: Path) -> None:
    for n in range(20):
        (tmp_path / f"f{n:02d}.txt").write_text("")
    async with context_with(tmp_path, {"max_results": 5}) as ctx:
        out = ok(await run_tool(ctx, "glob", pattern="*.txt"))
        assert out.splitlines()[:5] == [f"f{n:02d}.txt" for n in range(5)]
        assert "[truncated: showed the first 5 matches" in out


# -- grep -----------------------------------------------------------------------------------


async def test_grep(call: Call, tree: Any) -> None:
    (tree.work / "blob.bin").write_bytes(b"TODO\x00binary")
    found = ok(await call("grep", pattern="TODO"))
    assert found.splitlines() == [
        "docs/guide.md:2:TODO: write more",
        "src/pkg/util.py:2:    return 'TODO: tidy'",
    ]
    assert ok(await call("grep", pattern="TODO", glob="*.py")).splitlines() == [
        "src/pkg/util.py:2:    return 'TODO: tidy'"
    ]
    assert ok(await call("grep", pattern="todo", ignore_case=True, path="docs")) == (
        "docs/guide.md:2:TODO: write more"
    )
    assert ok(await call("grep", pattern=r"return \d+", path="src/main.py")) == (
        "src/main.py:4:    return 42"
    )
    assert ok(await call("grep", pattern="TODO", path=".git")) == ".git/config:2:TODO = hidden"
    nothing = ok(await call("grep", pattern="nowhere to be found", glob="*.md"))
    assert (
        nothing
        == 'no matches for "nowhere to be found" in the working directory (files matching *.md)'
    )
    assert "invalid regular expression" in failed(await call("grep", pattern="(unclosed"))


async def test_grep_is_capped(call: Call, tree: Any) -> None:
    (tree.work / "many.txt").write_text("hit\n" * 50)
    out = ok(await call("grep", pattern="hit", max_matches=3))
    assert out.splitlines() == [
        "many.txt:1:hit",
        "many.txt:2:hit",
        "many.txt:3:hit",
        "[truncated: stopped after 3 matches; narrow the pattern, the path or the glob]",
    ]


# -- write_file / edit_file -----------------------------------------------------------------


async def test_write_file_creates_and_replaces(call: Call, tree: Any) -> None:
    out = ok(await call("write_file", path="notes/today.txt", content="héllo\n"))
    assert out == "Wrote 7 bytes to notes/today.txt (new file)"
    assert (tree.work / "notes" / "today.txt").read_text() == "héllo\n"
    out = ok(await call("write_file", path="notes/today.txt", content="bye"))
    assert out == "Wrote 3 bytes to notes/today.txt (replaced)"
    assert (tree.work / "notes" / "today.txt").read_text() == "bye"
    assert "is a directory" in failed(await call("write_file", path="src", content="x"))
    assert "cannot write" in failed(await call("write_file", path="README.md/x", content="x"))


async def test_edit_file_replaces_one_exact_occurrence(call: Call, tree: Any) -> None:
    out = ok(
        await call("edit_file", path="src/main.py", old_string="return 42", new_string="return 43")
    )
    assert out == "Edited src/main.py: replaced 1 occurrence (line 4)"
    assert (tree.work / "src" / "main.py").read_text().endswith("    return 43\n")


async def test_edit_file_errors_say_what_to_do(call: Call, tree: Any) -> None:
    (tree.work / "dup.txt").write_text("x = 1\ny = 2\nx = 1\n")
    missing = failed(await call("edit_file", path="dup.txt", old_string="z = 3", new_string="z"))
    assert missing.startswith('old_string was not found in "dup.txt"')
    twice = failed(await call("edit_file", path="dup.txt", old_string="x = 1", new_string="x = 9"))
    assert twice.startswith('old_string occurs 2 times in "dup.txt" (lines 1, 3)')
    assert "replace_all" in twice
    assert (tree.work / "dup.txt").read_text() == "x = 1\ny = 2\nx = 1\n"  # untouched
    same = failed(await call("edit_file", path="dup.txt", old_string="y", new_string="y"))
    assert "the same" in same
    empty = failed(await call("edit_file", path="dup.txt", old_string="", new_string="y"))
    assert "empty" in empty
    assert "does not exist" in failed(
        await call("edit_file", path="nope.txt", old_string="a", new_string="b")
    )
    (tree.work / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    assert "not UTF-8" in failed(
        await call("edit_file", path="latin1.txt", old_string="caf", new_string="bar")
    )


async def test_edit_file_replace_all_and_crlf(call: Call, tree: Any) -> None:
    (tree.work / "dup.txt").write_text("x = 1\ny = 2\nx = 1\n")
    out = ok(
        await call(
            "edit_file", path="dup.txt", old_string="x = 1", new_string="x = 9", replace_all=True
        )
    )
    assert out == "Edited dup.txt: replaced 2 occurrences (first at line 1)"
    assert (tree.work / "dup.txt").read_text() == "x = 9\ny = 2\nx = 9\n"
    (tree.work / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    ok(await call("edit_file", path="win.txt", old_string="one\ntwo", new_string="1\n2"))
    assert (tree.work / "win.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"
