"""grep and glob cannot hang the process: a catastrophic regular expression ends with
an error once its time limit (grep_timeout) is up, while the event loop keeps serving;
a glob is matched in linear time; and grep's fast whole-file search finds exactly the
lines a line-by-line search finds."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from dsh.core import AbortSignal, Context, ToolContext, ToolResult, parse_preset

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

T = TypeVar("T")
BASE = '[agent.model]\nadapter = "scripted"\n\n[[plugin]]\nname = "dsh-tool-fs"\n'


async def timed_with_stall(work: Callable[[], Awaitable[T]]) -> tuple[T, float, float]:
    """Run ``work`` while another task ticks every 10 ms on the same loop: its result,
    how long it took and the largest delay a tick saw."""
    stall = 0.0
    done = False

    async def ticker() -> None:
        nonlocal stall
        last = time.monotonic()
        while not done:
            await anyio.sleep(0.01)
            now = time.monotonic()
            stall = max(stall, now - last - 0.01)
            last = now

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        await anyio.sleep(0.05)
        started = time.monotonic()
        result = await work()
        took = time.monotonic() - started
        done = True
    return result, took, stall


async def run_tool(ctx: Context, name: str, **arguments: Any) -> ToolResult:
    tool = ctx.tools.get(name)
    assert tool is not None
    return await tool.invoke(arguments, ToolContext(ctx.agents.create(), "c", AbortSignal()))


async def test_a_catastrophic_grep_pattern_errors_in_time_and_blocks_nobody(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.txt").write_text("fine\n" + "a" * 40 + "b\n")  # a 41-character line
    # A 1.5 s limit: a search run on the event loop would stall it at least that long.
    preset = BASE + "config = { grep_timeout = 1.5 }\n"
    async with Context.open(parse_preset(preset), cwd=tmp_path) as ctx:
        result, took, stall = await timed_with_stall(
            lambda: run_tool(ctx, "grep", pattern="(a|aa)+$")
        )
        assert result.is_error, result.content
        assert 'the pattern "(a|aa)+$" is too slow' in str(result.content)
        assert "grep_timeout" in str(result.content)
        assert took < 6.0, took
        assert stall < 1.0, stall
        # the same pattern line by line (a lookbehind keeps it off the fast path)
        result, took, stall = await timed_with_stall(
            lambda: run_tool(ctx, "grep", pattern="(?<!x)(a|aa)+$")
        )
        assert "is too slow" in str(result.content)
        assert took < 6.0, took
        assert stall < 1.0, stall
        # and the tool still answers sane patterns
        ok = await run_tool(ctx, "grep", pattern="^fi")
        assert ok.content == "a.txt:1:fine"


async def test_grep_timeout_is_configurable(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a" * 40 + "b\n")
    preset = BASE + "config = { grep_timeout = 0.2 }\n"
    async with Context.open(parse_preset(preset), cwd=tmp_path) as ctx:
        started = time.monotonic()
        result = await run_tool(ctx, "grep", pattern="(a|aa)+$")
        assert "more than 0.2 s (grep_timeout)" in str(result.content)
        assert time.monotonic() - started < 1.5


async def test_a_pathological_glob_returns_in_time(tmp_path: Path) -> None:
    (tmp_path / ("a" * 200)).write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ("a" * 120 + "b")).write_text("")
    async with Context.open(parse_preset(BASE), cwd=tmp_path) as ctx:
        for pattern, expected in [
            ("*a*a*a*a*a*a*a*a*a*a*b", 'no paths match "*a*a*a*a*a*a*a*a*a*a*b"'),
            ("**/*a*a*a*a*a*a*a*a*a*a*b", "sub/" + "a" * 120 + "b"),
            ("*/*a*a*a*a*a*a*a*a*a*a*b", "sub/" + "a" * 120 + "b"),
        ]:
            result, took, stall = await timed_with_stall(
                lambda pattern=pattern: run_tool(ctx, "glob", pattern=pattern)  # type: ignore[misc]
            )
            assert not result.is_error, result.content
            assert str(result.content).startswith(expected)
            assert took < 5.0, (pattern, took)  # backtracking would take far longer
            assert stall < 2.0, (pattern, stall)
        # grep's glob filter uses the same matcher
        result, took, _ = await timed_with_stall(
            lambda: run_tool(ctx, "grep", pattern="x", glob="*a*a*a*a*a*a*a*a*a*a*b")
        )
        assert "no matches" in str(result.content)
        assert took < 5.0


def test_globs_match_as_documented() -> None:
    from dsh.tool_fs._glob import compile_glob

    cases = {
        "*.py": (["a.py", ".hidden.py"], ["src/a.py", "a.pyc"]),
        "**/*.py": (["a.py", "src/a.py", "src/x/b.py"], ["a.txt", "src/a.pyc"]),
        "src/**": (["src/a", "src/x/y"], ["src", "lib/a"]),
        "**": (["a", "a/b/c"], []),
        "x/**/y": (["x/y", "x/a/y", "x/a/b/y"], ["x/ay", "y"]),
        "src/*.{ts,tsx}": (["src/a.ts", "src/a.tsx"], ["src/a.t", "a.ts"]),
        "{a,b{c,d}}/*": (["a/x", "bc/x", "bd/x"], ["b/x", "ac/x"]),
        "[abc]?[!x]": (["aqz", "cqq"], ["dqz", "aqx", "aq/"]),
        "[!]a]x": (["bx", "-x"], ["]x", "ax"]),  # a ] first in a class is a character
        "[a-c]x": (["bx"], ["dx"]),
        "*a*b*c*d": (["abcd", "xaybzcwd", "aabbccdd"], ["abdc", "a/bcd"]),
        "a[": (["a["], ["a"]),
        "{a,b": (["{a,b"], ["a"]),
        "**/*a*b/**/*c*d": (["xayb/q/cd", "ab/cd", "r/ab/s/t/ccdd"], ["ab/c", "cd/ab"]),
    }
    for pattern, (yes, no) in cases.items():
        matcher = compile_glob(pattern)
        for path in yes:
            assert matcher.match(path), (pattern, path)
        for path in no:
            assert not matcher.match(path), (pattern, path)


def test_too_many_alternatives_are_refused() -> None:
    from dsh.tool_fs._glob import compile_glob
    from dsh.tool_fs._paths import FsError

    with pytest.raises(FsError, match="alternatives"):
        compile_glob("{a,b}" * 9)


LINES = [
    "def main():",
    "    return 42  # TODO: tidy",
    "",
    "class Thing(Base):",
    "\tx = [1, 2, 3]",
    "a\tb  c",
    "über straße ÜBER",
    "end with space ",
    "foo(bar)baz",
    "ab",
    "x" * 50,
    "line\rwith a carriage return",
    "last line without newline",
]
PATTERNS = [
    r"def",
    r"^def \w+\(",
    r"^$",
    r"^",
    r"$",
    r"\s+$",
    r"\s\S",
    r"a\sb",
    r"[^a-z]{3}",
    r"[^]",
    r"\W\W",
    r"\D+",
    r"\bThing\b",
    r"(?i)über",
    r"(?:foo|bar)+",
    r"(?P<w>\w)(?P=w)",
    r"x{10,}",
    r"[ \t]+",
    r"e\s*$",
    r"h\n",
    r"(?<=a)b",
    r"o(?=\()",
    r"\Aab\Z",
    r"(\w)\1",
    r"[[:space:]]x",
    r"\d+\s*#",
    r".*",
    r"a.b",
    r"\r",
    r"[\s]",
    r"[^\s]",
]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("ignore_case", [False, True])
def test_whole_file_search_finds_the_lines_a_line_search_finds(
    pattern: str, ignore_case: bool
) -> None:
    from dsh.tool_fs._paths import FsError
    from dsh.tool_fs._search import LineSearch, line_safe

    def nothing() -> None:
        pass

    try:
        each = LineSearch(pattern, ignore_case=ignore_case, budget=5.0, whole=False)
    except FsError:
        return  # not a valid pattern for either
    for text in ("\n".join(LINES), "\n".join(LINES) + "\n", "\n\n", "x", ""):
        expected = list(each.lines(text, nothing))
        if line_safe(pattern) is not None:
            whole = LineSearch(pattern, ignore_case=ignore_case, budget=5.0, whole=True)
            assert list(whole.lines(text, nothing)) == expected, (pattern, text[:30])


def test_patterns_that_may_cross_a_line_end_are_searched_line_by_line() -> None:
    from dsh.tool_fs._search import line_safe

    assert line_safe(r"def\s+\w+") == r"def[^\S\n]+\w+"
    assert line_safe(r"[^a-z]x") == r"[^\na-z]x"
    for pattern in [r"a\nb", r"(?<=a)b", r"(?=x)", r"\Z", r"(\w)\1", r"[^]]", r"(?s).", "a\nb"]:
        assert line_safe(pattern) is None, pattern


def test_a_call_has_a_total_budget_besides_the_one_per_attempt() -> None:
    from dsh.tool_fs._search import LineSearch, SearchTooSlow

    def nothing() -> None:
        pass

    text = "a sane line of text\n" * 200_000
    search = LineSearch(r"(?<=x)y", ignore_case=False, budget=0.001, whole=False)
    with pytest.raises(SearchTooSlow, match=r"more than 0\.02 s in all \(20 x grep_timeout\)"):
        list(search.lines(text, nothing))
