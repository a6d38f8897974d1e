"""The read-side file operations behind the tools: blocking, run in worker threads.

Each takes the call's :class:`~dsh.tool_fs._paths.Root`, resolves every path through
it (refusing what lies outside) and returns the text the model sees, or raises
:class:`~dsh.tool_fs._paths.FsError` with a message for the model. Long work calls
``check()`` now and then, which raises :class:`Stopped` once the call is cancelled.
The writing operations are in :mod:`dsh.tool_fs._write`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from dsh.core import DshError
from dsh.tool_fs._files import HardLinked, lstat_of, open_regular, quote, walk
from dsh.tool_fs._glob import check_glob, compile_glob
from dsh.tool_fs._paths import FsError, Root
from dsh.tool_fs._search import LineSearch

__all__ = [
    "Limits",
    "ReadText",
    "Stopped",
    "glob_paths",
    "grep",
    "list_dir",
    "read_file",
]

Check = Callable[[], None]

_PROBE = 8192
"""Bytes looked at to tell a binary file (a NUL byte among them) from text."""
_GREP_LINE_CHARS = 400
"""Characters of one matching line that ``grep`` shows."""
_GREP_MAX_FILE = 32 * 1024 * 1024
"""Files larger than this are not searched by ``grep`` (the output says so)."""
_SEEK_CHUNK = 1 << 16


class Stopped(DshError):
    """The call was cancelled while the operation ran."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The caps of one plugin row (from its config)."""

    max_read_bytes: int
    max_read_lines: int
    max_output_bytes: int
    max_results: int
    max_matches: int
    skip_dirs: frozenset[str]
    grep_timeout: float = 0.3


class _Output:
    """Lines of text up to a byte cap."""

    __slots__ = ("full", "lines", "max_bytes", "size")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.lines: list[str] = []
        self.size = 0
        self.full = False

    def add(self, line: str) -> bool:
        """Append ``line``; False (and nothing added) once it would pass the cap."""
        size = len(line.encode("utf-8", "replace")) + 1
        if self.full or self.size + size > self.max_bytes:
            self.full = True
            return False
        self.lines.append(line)
        self.size += size
        return True

    def text(self, marker: str | None = None) -> str:
        body = "\n".join(self.lines)
        if marker:
            return f"{body}\n{marker}" if body else marker
        return body


def _is_binary(head: bytes) -> bool:
    return b"\0" in head


# -- read_file -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadText:
    """What ``read_file`` read: the text for the model, and the lines as they are."""

    shown: str
    """The lines, with a ``[truncated: ...]`` marker when the file goes on."""
    exact: str
    """The lines exactly as in the file (line ends kept; no marker)."""
    complete: bool
    """True when ``exact`` is every line asked for: the caps did not cut it short."""


def read_file(
    root: Root, path: str, offset: int, limit: int | None, limits: Limits, check: Check
) -> ReadText:
    """Lines ``offset``... of a text file, at most ``limit`` lines and
    ``limits.max_read_bytes`` bytes, with a marker saying where to go on when cut."""
    real = root.resolve(path)
    name = root.relative(real)
    handle, info = open_regular(root, path, real, name)
    lines_wanted = min(limit or limits.max_read_lines, limits.max_read_lines)
    max_bytes = limits.max_read_bytes
    with handle:
        if _is_binary(handle.read(_PROBE)):
            raise FsError(
                f"{quote(name)} looks like a binary file ({info.st_size} bytes); not shown"
            )
        handle.seek(0)
        reached, lines_before = _seek_line(handle, offset, check)
        data = handle.read(max_bytes + 1) if reached else b""
    if not data:
        if offset == 1:
            return ReadText("(the file is empty)", "", True)
        raise FsError(
            f"offset {offset} is past the end of {quote(name)}, which has {lines_before} lines"
        )
    cut = len(data) > max_bytes
    if cut:
        data = data[:max_bytes]
    pieces = data.split(b"\n")
    tail = pieces.pop()  # after the last newline: a partial line when cut, else the last line
    if tail and not cut:
        pieces.append(tail)
    shown = pieces[:lines_wanted]
    if not shown:  # one line longer than the byte cap
        text = tail.decode("utf-8", "ignore")
        return ReadText(
            f"{text}\n[truncated: line {offset} is longer than {max_bytes} bytes; showed its"
            f" first {max_bytes} bytes; read on with offset={offset + 1}]",
            text,
            False,
        )
    text = b"\n".join(shown).decode("utf-8", "replace")
    last = offset + len(shown) - 1
    asked_all = limit is not None and len(shown) >= limit
    if len(pieces) > lines_wanted:
        return ReadText(
            f"{text}\n[truncated: showed lines {offset}-{last} (a limit of {lines_wanted} lines);"
            f" the file goes on: read on with offset={last + 1}]",
            text + "\n",
            asked_all,
        )
    if cut:
        return ReadText(
            f"{text}\n[truncated: showed lines {offset}-{last} (a limit of {max_bytes} bytes per"
            f" call); the file goes on: read on with offset={last + 1}]",
            text + "\n",
            asked_all,
        )
    return ReadText(text, data.decode("utf-8", "replace"), True)


def _seek_line(handle: BinaryIO, offset: int, check: Check) -> tuple[bool, int]:
    """Position ``handle`` at the start of line ``offset`` (1-based). Returns whether
    the file reaches that far and how many lines come before the position (all of
    them, when it does not)."""
    to_skip = offset - 1
    position = 0
    seen = 0
    last = b""
    while to_skip > 0:
        check()
        chunk = handle.read(_SEEK_CHUNK)
        if not chunk:
            # a last line without a newline still counts as a line
            return False, seen + (1 if last and last != b"\n" else 0)
        last = chunk[-1:]
        count = chunk.count(b"\n")
        if count < to_skip:
            to_skip -= count
            seen += count
            position += len(chunk)
            continue
        index = -1
        for _ in range(to_skip):
            index = chunk.index(b"\n", index + 1)
        position += index + 1
        seen += to_skip
        to_skip = 0
    handle.seek(position)
    return True, seen


# -- list_dir ------------------------------------------------------------------------------


def list_dir(root: Root, path: str, limits: Limits, check: Check) -> str:
    """The entries of a directory, sorted: ``name/`` for directories, ``name -> target``
    for symlinks, ``name`` otherwise."""
    real = root.resolve(path)
    name = root.relative(real)
    info = lstat_of(root, path, real)
    if not stat.S_ISDIR(info.st_mode):
        raise FsError(f"{quote(name)} is not a directory; use read_file to read a file")
    try:
        with os.scandir(real) as scan:
            entries = sorted(scan, key=lambda e: e.name)
    except PermissionError:
        raise FsError(f"{quote(name)}: permission denied") from None
    if not entries:
        return "(empty directory)"
    out = _Output(limits.max_output_bytes)
    shown = 0
    for entry in entries:
        check()
        if shown >= limits.max_results or not out.add(_describe_entry(entry)):
            break
        shown += 1
    if shown < len(entries):
        return out.text(
            f"[truncated: showed {shown} of {len(entries)} entries; use glob to narrow down]"
        )
    return out.text()


def _describe_entry(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            return f"{entry.name} -> {os.readlink(entry.path)}"
        if entry.is_dir():
            return f"{entry.name}/"
    except OSError:
        pass
    return entry.name


# -- walking -------------------------------------------------------------------------------


def _directory(root: Root, path: str) -> tuple[str, str]:
    real = root.resolve(path)
    name = root.relative(real)
    info = lstat_of(root, path, real)
    if not stat.S_ISDIR(info.st_mode):
        raise FsError(f"{quote(name)} is not a directory")
    return real, name


# -- glob ----------------------------------------------------------------------------------


def glob_paths(root: Root, pattern: str, path: str, limits: Limits, check: Check) -> str:
    """Paths below ``path`` matching ``pattern``, relative to the root (directories
    end in ``/``)."""
    base, base_name = _directory(root, path)
    matcher = compile_glob(check_glob(pattern))
    max_depth = None if "**" in pattern else pattern.count("/")
    paths: list[str] = []
    truncated = False
    for real, relative, is_dir in walk(root, base, limits.skip_dirs, check, max_depth):
        if not matcher.match(relative):
            continue
        if len(paths) >= limits.max_results:
            truncated = True
            break
        paths.append(root.relative(real).replace(os.sep, "/") + ("/" if is_dir else ""))
    if not paths:
        where = "the working directory" if base_name == "." else quote(base_name)
        return f'no paths match "{pattern}" in {where}'
    out = _Output(limits.max_output_bytes)
    shown = 0
    for path_text in sorted(paths):
        if not out.add(path_text):
            truncated = True
            break
        shown += 1
    if truncated:
        return out.text(
            f"[truncated: showed the first {shown} matches; narrow the pattern or the path]"
        )
    return out.text()


# -- grep ----------------------------------------------------------------------------------


def grep(
    root: Root,
    pattern: str,
    path: str,
    file_glob: str | None,
    ignore_case: bool,
    max_matches: int | None,
    limits: Limits,
    check: Check,
) -> str:
    """Lines matching the regular expression ``pattern`` in the files at or below
    ``path``, as ``path:line:text``."""
    search = LineSearch(pattern, ignore_case=ignore_case, budget=limits.grep_timeout)
    matcher = _file_matcher(file_glob)
    real = root.resolve(path)
    name = root.relative(real)
    info = lstat_of(root, path, real)
    wanted = min(max_matches or limits.max_matches, limits.max_matches)
    files: Iterator[tuple[str, str, bool]]
    single = not stat.S_ISDIR(info.st_mode)
    if single:
        files = iter([(real, os.path.basename(real), False)])
    else:
        files = walk(root, real, limits.skip_dirs, check)
    out = _Output(limits.max_output_bytes)
    matches = 0
    skipped_large: list[str] = []
    skipped_linked: list[str] = []
    stopped = False
    for file_real, relative, is_dir in files:
        if is_dir or (matcher is not None and not matcher(relative)):
            continue
        shown_name = root.relative(file_real).replace(os.sep, "/")
        try:
            text = _text_of(root, file_real, shown_name, skipped_large)
        except HardLinked:
            if single:
                raise
            skipped_linked.append(shown_name)
            continue
        except (FsError, OSError):
            if single:
                raise
            continue  # unreadable (permissions, vanished): not a match
        if text is None:
            continue
        for number, line in search.lines(text, check):
            if len(line) > _GREP_LINE_CHARS:
                line = line[:_GREP_LINE_CHARS] + "…"
            if matches >= wanted or not out.add(f"{shown_name}:{number}:{line}"):
                stopped = True
                break
            matches += 1
        if stopped:
            break
    where = "the working directory" if name == "." else quote(name)
    notes: list[str] = []
    if skipped_large:
        listed = ", ".join(skipped_large[:5]) + (" ..." if len(skipped_large) > 5 else "")
        notes.append(f"[not searched: files larger than {_GREP_MAX_FILE} bytes: {listed}]")
    if skipped_linked:
        listed = ", ".join(skipped_linked[:5]) + (" ..." if len(skipped_linked) > 5 else "")
        notes.append(
            f"[not searched: files with several hard links (dsh does not read through hard"
            f" links): {listed}]"
        )
    if stopped:
        notes.insert(
            0,
            f"[truncated: stopped after {matches} matches; narrow the pattern, the path or"
            " the glob]",
        )
    if not matches:
        found = f'no matches for "{pattern}" in {where}'
        if file_glob:
            found += f" (files matching {file_glob})"
        return "\n".join([found, *notes])
    return out.text("\n".join(notes) or None)


def _file_matcher(file_glob: str | None) -> Callable[[str], bool] | None:
    if not file_glob:
        return None
    matcher = compile_glob(check_glob(file_glob))
    if "/" in file_glob:
        return matcher.match
    return lambda relative: matcher.match(relative.rsplit("/", 1)[-1])


def _text_of(root: Root, real: str, shown_name: str, skipped_large: list[str]) -> str | None:
    """The text of a file to search (lines end in ``\\n``), None for a binary file or
    one larger than the cap (noted in ``skipped_large``)."""
    handle, info = open_regular(root, shown_name, os.path.realpath(real), shown_name)
    with handle:
        if info.st_size > _GREP_MAX_FILE:
            skipped_large.append(shown_name)
            return None
        head = handle.read(_PROBE)
        if _is_binary(head):
            return None
        data = head + handle.read(_GREP_MAX_FILE + 1 - len(head))
    if len(data) > _GREP_MAX_FILE:  # it grew meanwhile
        skipped_large.append(shown_name)
        return None
    return data.decode("utf-8", "replace").replace("\r\n", "\n")
