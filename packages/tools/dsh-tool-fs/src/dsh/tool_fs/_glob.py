"""Glob patterns over relative, ``/``-separated paths, matched in linear time.

``*`` and ``?`` stay within one path segment, ``**`` spans any number of segments
(``**/`` also matches none), ``[abc]`` / ``[!abc]`` are character classes and
``{a,b}`` alternatives (``*.{ts,tsx}``). A pattern without ``/`` matches names in
the searched directory only, as in a shell: use ``**/*.py`` to search below it.

The matcher never backtracks exponentially (a regular expression made of the pattern
did: ``*a*a*a*a*a*a*a*a*a*a*b`` froze the process): braces are expanded first, each
alternative is split into segments, a segment is matched by the greedy wildcard
algorithm (at most name length x pattern length steps) and ``**`` segments by a set
of states advanced once per path segment.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from dsh.tool_fs._paths import FsError

__all__ = ["MAX_ALTERNATIVES", "GlobMatcher", "check_glob", "compile_glob"]

MAX_ALTERNATIVES = 256
"""The most alternatives ``{a,b}`` groups may expand to in one pattern."""


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


@dataclass(frozen=True, slots=True)
class _Class:
    """``[...]``: one character in (or, negated, not in) a set of characters and ranges."""

    negate: bool
    chars: frozenset[str]
    ranges: tuple[tuple[str, str], ...]

    def accepts(self, c: str) -> bool:
        inside = c in self.chars or any(low <= c <= high for low, high in self.ranges)
        return inside != self.negate


class _Star:
    """``*``: any characters of one segment."""


class _Any:
    """``?``: one character."""


STAR = _Star()
ANY = _Any()

_Token = str | _Class | _Star | _Any
_Segment = tuple[_Token, ...]
_GLOBSTAR = "**/"  # a whole ``**`` segment followed by more: zero or more segments
_REST = "**"  # a whole ``**`` segment at the end: one or more segments
_FAST_STARS = 2
"""Segments with at most this many ``*`` are matched by a compiled ``re`` pattern: its
backtracking is then polynomial in a name (at most 255 characters), never exponential."""


class _Compiled:
    """A segment matched by a stdlib regular expression (few ``*``: bounded)."""

    __slots__ = ("fullmatch", "source", "stars")

    def __init__(self, tokens: _Segment) -> None:
        self.source = "".join(map(_regex_of, tokens))
        self.stars = sum(token is STAR for token in tokens)
        self.fullmatch = re.compile(self.source, re.DOTALL).fullmatch


_Part = _Segment | _Compiled | str


def _whole_regex(segments: tuple[_Part, ...]) -> Callable[[str], object] | None:
    """One stdlib pattern for the whole path when its backtracking stays polynomial, else
    None. A segment with one ``*`` matches a name in one way only (its fixed parts
    have fixed lengths); what makes ``re`` retry is a segment with two (a name splits
    in up to its length ways) or a ``**`` (a path splits in up to its segment count):
    one of those is allowed, as the product of two would no longer be small."""
    ambiguous = 0
    for segment in segments:
        if isinstance(segment, str):
            ambiguous += 1
        elif isinstance(segment, _Compiled):
            ambiguous += max(0, segment.stars - 1)
        else:
            return None  # a segment with more than two *
    if ambiguous > 1:
        return None
    pieces: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == _GLOBSTAR:
            pieces.append(r"(?:[^/]*/)*")
        elif segment == _REST:
            pieces.append(r"[^/]*(?:/[^/]*)*")
        elif isinstance(segment, _Compiled):
            pieces.append(segment.source + ("" if last else "/"))
    return re.compile("".join(pieces), re.DOTALL).fullmatch


class GlobMatcher:
    """A compiled glob: :meth:`match` tells whether a relative path matches it."""

    __slots__ = ("alternatives", "fast", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        fast: list[Callable[[str], object]] = []
        slow: list[tuple[_Part, ...]] = []
        for alternative in _expand_braces(pattern):
            segments = _segments(alternative)
            whole = _whole_regex(segments)
            if whole is not None:
                fast.append(whole)
            else:
                slow.append(segments)
        self.fast = tuple(fast)
        self.alternatives = tuple(slow)

    def match(self, path: str) -> bool:
        """True if ``path`` (relative, ``/``-separated) matches the whole pattern."""
        if any(fullmatch(path) is not None for fullmatch in self.fast):
            return True
        if not self.alternatives:
            return False
        parts = path.split("/")
        return any(_match_parts(segments, parts) for segments in self.alternatives)

    def __repr__(self) -> str:
        return f"<GlobMatcher {self.pattern!r}>"


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> GlobMatcher:
    """The matcher of ``pattern`` (:class:`FsError` if it has too many alternatives)."""
    return GlobMatcher(pattern)


# -- matching ------------------------------------------------------------------------------


def _match_parts(segments: tuple[_Part, ...], parts: list[str]) -> bool:
    """Advance the set of pattern positions once per path segment."""
    end = len(segments)
    if _GLOBSTAR not in segments and _REST not in segments:
        return end == len(parts) and all(map(_match_part, segments, parts))
    states = _closure(segments, {0})
    for part in parts:
        following: set[int] = set()
        for state in states:
            if state == end:
                continue
            segment = segments[state]
            if segment == _GLOBSTAR:
                following.add(state)
            elif segment == _REST:
                following.update((state, state + 1))
            elif _match_part(segment, part):
                following.add(state + 1)
        if not following:
            return False
        states = _closure(segments, following)
    return end in states


def _closure(segments: tuple[_Part, ...], states: set[int]) -> set[int]:
    """``states`` plus the positions reached by letting ``**/`` match no segment."""
    todo = list(states)
    while todo:
        state = todo.pop()
        if state < len(segments) and segments[state] == _GLOBSTAR and state + 1 not in states:
            states.add(state + 1)
            todo.append(state + 1)
    return states


def _match_part(segment: _Part, name: str) -> bool:
    if isinstance(segment, _Compiled):
        return segment.fullmatch(name) is not None
    if isinstance(segment, str):
        return False  # ** segments are handled by the caller
    return _match_segment(segment, name)


def _match_segment(tokens: _Segment, name: str) -> bool:
    """The greedy wildcard algorithm: on a mismatch, let the last ``*`` take one more
    character. Every other token matches exactly one character, so this is exact and
    takes at most ``len(name) * len(tokens)`` steps."""
    t = n = 0
    star = -1
    star_n = 0
    count = len(tokens)
    while n < len(name):
        token = tokens[t] if t < count else None
        if token is STAR:
            star, star_n = t, n
            t += 1
        elif token is not None and _one(token, name[n]):
            t += 1
            n += 1
        elif star >= 0:
            star_n += 1
            t, n = star + 1, star_n
        else:
            return False
    while t < count and tokens[t] is STAR:
        t += 1
    return t == count


def _one(token: _Token, c: str) -> bool:
    if isinstance(token, str):
        return token == c
    if isinstance(token, _Class):
        return token.accepts(c)
    return True  # ANY


# -- parsing -------------------------------------------------------------------------------


def _segments(pattern: str) -> tuple[_Part, ...]:
    raw = pattern.split("/")
    out: list[_Part] = []
    for index, segment in enumerate(raw):
        if segment == "**":
            out.append(_REST if index == len(raw) - 1 else _GLOBSTAR)
        else:
            tokens = _tokens(segment)
            fast = sum(token is STAR for token in tokens) <= _FAST_STARS
            out.append(_Compiled(tokens) if fast else tokens)
    return tuple(out)


def _tokens(segment: str) -> _Segment:
    out: list[_Token] = []
    i, n = 0, len(segment)
    while i < n:
        c = segment[i]
        if c == "*":
            if not out or out[-1] is not STAR:  # ** inside a segment acts as *
                out.append(STAR)
        elif c == "?":
            out.append(ANY)
        elif c == "[" and (end := _class_end(segment, i)) is not None:
            out.append(_parse_class(segment[i + 1 : end]))
            i = end
        else:
            out.append(c)
        i += 1
    return tuple(out)


def _regex_of(token: _Token) -> str:
    if isinstance(token, str):
        return re.escape(token)
    if token is STAR:
        return "[^/]*"
    if isinstance(token, _Class):
        body = "".join(re.escape(c) for c in sorted(token.chars))
        body += "".join(f"{re.escape(low)}-{re.escape(high)}" for low, high in token.ranges)
        return f"[{'^' if token.negate else ''}{body}]"
    return "[^/]"  # ANY


def _class_end(pattern: str, i: int) -> int | None:
    """Index of the ``]`` closing the class opened at ``i`` (None: a literal ``[``)."""
    j, n = i + 1, len(pattern)
    if j < n and pattern[j] in "!^":
        j += 1
    if j < n and pattern[j] == "]":
        j += 1
    while j < n and pattern[j] != "]":
        j += 1
    return j if j < n else None


def _parse_class(body: str) -> _Class:
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    chars: set[str] = set()
    ranges: list[tuple[str, str]] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            low, high = body[i], body[i + 2]
            if low > high:
                raise FsError(f'the range "{low}-{high}" in a glob [...] class is reversed')
            ranges.append((low, high))
            i += 3
        else:
            chars.add(body[i])
            i += 1
    if negate:
        chars.add("/")
    return _Class(negate, frozenset(chars), tuple(ranges))


def _expand_braces(pattern: str) -> list[str]:
    """Every brace-free pattern ``pattern`` stands for (``a{b,c}`` -> ``ab``, ``ac``);
    braces are literal when they do not balance."""
    if not _balanced_braces(pattern):
        return [pattern]
    results = _expand(pattern)
    if len(results) > MAX_ALTERNATIVES:
        raise FsError(
            f'glob pattern "{pattern}" expands to {len(results)} alternatives (at most'
            f" {MAX_ALTERNATIVES}); use fewer {{a,b}} groups"
        )
    return list(dict.fromkeys(results))


def _expand(pattern: str) -> list[str]:
    start = _first_brace(pattern)
    if start is None:
        return [pattern]
    depth = 0
    pieces: list[str] = []
    last = start + 1
    for i in range(start, len(pattern)):
        c = pattern[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                pieces.append(pattern[last:i])
                head, tail = pattern[:start], pattern[i + 1 :]
                out: list[str] = []
                for piece in pieces:
                    for inner in _expand(piece):
                        out.extend(_expand(head + inner + tail))
                        if len(out) > MAX_ALTERNATIVES:
                            return out
                return out
        elif c == "," and depth == 1:
            pieces.append(pattern[last:i])
            last = i + 1
    return [pattern]  # unreachable for balanced braces


def _first_brace(pattern: str) -> int | None:
    """The first ``{`` outside a ``[...]`` class."""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "[" and (end := _class_end(pattern, i)) is not None:
            i = end + 1
            continue
        if c == "{":
            return i
        i += 1
    return None


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
