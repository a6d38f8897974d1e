"""``grep``'s matcher: the ``regex`` package with a time budget per call.

The standard library's ``re`` cannot be interrupted and holds the GIL while it
backtracks, so one pattern such as ``(a|aa)+$`` froze the whole process (every agent,
every client). ``regex`` takes a ``timeout`` and releases the GIL while it matches a
``str``. One match attempt (a whole file, or one line) may take ``grep_timeout``
seconds, a ``grep`` call :data:`TOTAL_FACTOR` times that in all; past either the call
ends with :class:`SearchTooSlow`. A catastrophic pattern blows the first limit on its
first bad line; a legitimate search of many files spends the second slowly. Time is
CPU time (``regex`` counts the process's during an attempt; the worker thread's is
summed), so a busy machine does not eat a search's budget.

Lines are matched one by one (``^``, ``$``, ``\\Z``... are about the line). When the
pattern cannot reach across a line end, which :func:`line_safe` decides conservatively
(rewriting ``\\s``, ``\\W``, ``\\D`` and ``[^...]`` so that they leave ``\\n`` out), the
whole file is searched at once in multiline mode instead: the same lines match, with one
call of the matcher per matching line rather than one per line.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import regex  # type: ignore[import-untyped,unused-ignore]

from dsh.tool_fs._paths import FsError

__all__ = ["TOTAL_FACTOR", "LineSearch", "SearchTooSlow", "line_safe"]

TOTAL_FACTOR = 20
"""A ``grep`` call may spend this many times ``grep_timeout`` matching, in all."""

_CHECK_EVERY = 1024
"""Lines matched one by one between two cancellation checks."""

_OUTSIDE = {
    "w": r"\w",
    "d": r"\d",
    "b": r"\b",
    "B": r"\B",
    "S": r"\S",
    "s": r"[^\S\n]",
    "W": r"[^\w\n]",
    "D": r"[^\d\n]",
}
"""Escapes with a letter that are line-safe outside a class, as rewritten."""
_INSIDE = frozenset("wdS")
"""Escapes with a letter that are line-safe inside a class."""
_GROUP = re.compile(r"\(\?(?::|>|P?<\w+>|P=\w+\)|[aimux]+\)|[aimux]+:)")
"""Group openings that cannot look around: non-capturing, atomic, named, flags."""
_QUANTIFIER = re.compile(r"\{\d*(?:,\d*)?\}")


class SearchTooSlow(FsError):
    """The pattern spent the call's matching budget (catastrophic backtracking)."""


def line_safe(pattern: str) -> str | None:
    """``pattern`` rewritten so that it cannot match a newline, or None when that is
    not certain (lookarounds, ``\\A``/``\\Z``, back references, ``\\p{..}``, fuzzy
    matching, control characters...): then lines are matched one by one."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c < " ":
            return None  # a literal newline, or a range from a control character
        if c == "\\":
            if i + 1 >= n:
                return None
            e = pattern[i + 1]
            if e < " ":
                return None
            if e.isalnum() or e == "_":
                if in_class:
                    if e not in _INSIDE:
                        return None
                    out.append("\\" + e)
                elif e in _OUTSIDE:
                    out.append(_OUTSIDE[e])
                else:
                    return None
            else:
                out.append("\\" + e)  # an escaped punctuation character: itself
            i += 2
            continue
        if in_class:
            if c == "[" and i + 1 < n and pattern[i + 1] in ":=.":
                return None  # a POSIX class such as [:space:]
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            j = i + 1
            negate = j < n and pattern[j] == "^"
            if negate:
                j += 1
                if j < n and pattern[j] in "]-":
                    return None
                out.append("[^\\n")
            else:
                out.append("[")
                if j < n and pattern[j] == "]":
                    out.append("]")
                    j += 1
            in_class = True
            i = j
            continue
        if c == "(" and pattern.startswith("(?", i):
            group = _GROUP.match(pattern, i)
            if group is None:
                return None  # lookarounds, conditionals, comments, other flags
            out.append(group.group())
            i = group.end()
            continue
        if c == "{":
            quantifier = _QUANTIFIER.match(pattern, i)
            if quantifier is None:
                return None  # fuzzy matching, or a literal brace
            out.append(quantifier.group())
            i = quantifier.end()
            continue
        out.append(c)
        i += 1
    return None if in_class else "".join(out)


class LineSearch:
    """The lines of a text that ``pattern`` matches: each attempt within ``budget``
    seconds, every :meth:`lines` call of this object within ``TOTAL_FACTOR`` times that
    together."""

    __slots__ = ("budget", "pattern", "regex", "spent", "total", "whole")

    def __init__(
        self, pattern: str, *, ignore_case: bool, budget: float, whole: bool | None = None
    ) -> None:
        self.pattern = pattern
        self.budget = budget
        self.total = budget * TOTAL_FACTOR
        self.spent = 0.0
        flags = regex.IGNORECASE if ignore_case else 0
        safe = line_safe(pattern) if whole is not False else None
        if whole and safe is None:
            raise ValueError(f"{pattern!r} is not line-safe")
        try:
            regex.compile(pattern, flags)  # errors name the pattern the model wrote
            compiled: Any = regex.compile(safe, flags | regex.MULTILINE) if safe else None
            self.regex: Any = compiled or regex.compile(pattern, flags)
        except regex.error as exc:
            raise FsError(f"invalid regular expression {pattern!r}: {exc}") from None
        self.whole = safe is not None

    def lines(self, text: str, check: Callable[[], None]) -> Iterator[tuple[int, str]]:
        """``(line number, line)`` for each line of ``text`` (``\\n``-separated, a final
        newline ends the last line) that the pattern matches somewhere."""
        if self.whole:
            return self._whole(text, check)
        return self._each(text, check)

    def _search(self, text: str, pos: int) -> Any:
        remaining = self.total - self.spent
        if remaining <= 0:
            raise self._too_slow(in_all=True)
        started = time.thread_time()
        try:
            return self.regex.search(text, pos, timeout=min(self.budget, remaining))
        except TimeoutError:
            raise self._too_slow(in_all=self.budget > remaining) from None
        finally:
            self.spent += time.thread_time() - started

    def _whole(self, text: str, check: Callable[[], None]) -> Iterator[tuple[int, str]]:
        end = len(text)
        pos = 0
        number = 1
        counted = 0  # newlines before this offset are in number
        while pos < end:
            check()
            found = self._search(text, pos)
            if found is None:
                return
            start = found.start()
            if start >= end and text.endswith("\n"):
                return  # the empty "line" after the final newline
            line_start = text.rfind("\n", 0, start) + 1
            line_end = text.find("\n", start)
            if line_end < 0:
                line_end = end
            number += text.count("\n", counted, line_start)
            counted = line_start
            yield number, text[line_start:line_end]
            pos = line_end + 1

    def _each(self, text: str, check: Callable[[], None]) -> Iterator[tuple[int, str]]:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for number, line in enumerate(lines, 1):
            if number % _CHECK_EVERY == 0:
                check()
            if self._search(line, 0) is not None:
                yield number, line

    def _too_slow(self, *, in_all: bool) -> SearchTooSlow:
        if in_all:
            return SearchTooSlow(
                f'the pattern "{self.pattern}" is too slow: matching it took more than'
                f" {self.total:g} s in all ({TOTAL_FACTOR} x grep_timeout), so grep stopped;"
                " narrow path and glob, or simplify the pattern"
            )
        return SearchTooSlow(
            f'the pattern "{self.pattern}" is too slow: matching it took more than'
            f" {self.budget:g} s (grep_timeout), so grep stopped. Nested or overlapping"
            " repetition such as (a|aa)+ or (a+)+ backtracks without end on some lines;"
            " simplify the pattern (or narrow path and glob)"
        )
