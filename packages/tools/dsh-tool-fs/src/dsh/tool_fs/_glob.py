"""Glob patterns over relative, ``/``-separated paths.

``*`` and ``?`` stay within one path segment, ``**`` spans any number of segments
(``**/`` also matches none), ``[abc]`` / ``[!abc]`` are character classes and
``{a,b}`` alternatives (``*.{ts,tsx}``). A pattern without ``/`` matches names in
the searched directory only, as in a shell: use ``**/*.py`` to search below it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from dsh.tool_fs._paths import FsError

__all__ = ["check_glob", "compile_glob"]


def check_glob(pattern: str) -> str:
    """``pattern`` if it is a usable relative glob, else :class:`FsError`."""
    if not pattern.strip():
        raise FsError("the glob pattern is empty")
    if pattern.startswith("/"):
        raise FsError(
            f'glob pattern "{pattern}" is absolute; give a pattern relative to path'
            ' (e.g. "**/*.py") and the directory as path'
        )
    if ".." in pattern.split("/"):
        raise FsError(f'glob pattern "{pattern}" contains ".."; set path instead')
    return pattern


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regex matching the relative paths ``pattern`` matches."""
    return re.compile(_translate(pattern) + r"\Z", re.DOTALL)


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    depth = 0  # open {...} groups
    braces = _balanced_braces(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                at_start = i == 0 or pattern[i - 1] == "/"
                j = i + 2
                if at_start and j < n and pattern[j] == "/":
                    out.append(r"(?:[^/]*/)*")  # **/ : any number of whole segments
                    i = j + 1
                    continue
                if at_start and j == n:
                    out.append(r".*")  # trailing ** : everything below
                    i = j
                    continue
                out.append(r"[^/]*")  # ** inside a segment acts as *
                i = j
                continue
            out.append(r"[^/]*")
        elif c == "?":
            out.append(r"[^/]")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))  # no closing bracket: a literal [
            else:
                body = pattern[i + 1 : j]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = body.replace("\\", "\\\\")
                out.append(f"[^/{body}]" if negate else f"[{body}]")
                i = j
        elif c == "{" and braces:
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _balanced_braces(pattern: str) -> bool:
    """True if every ``{`` closes (else braces are literal characters)."""
    depth = 0
    for c in pattern:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0
