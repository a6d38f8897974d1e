"""The file operations behind the tools: blocking, run in worker threads.

Each takes the call's :class:`~dsh.tool_fs._paths.Root`, resolves every path through
it (refusing what lies outside) and returns the text the model sees, or raises
:class:`~dsh.tool_fs._paths.FsError` with a message for the model. Long work calls
``check()`` now and then, which raises :class:`Stopped` once the call is cancelled.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from dsh.tool_fs._glob import check_glob, compile_glob
from dsh.tool_fs._paths import FsError, Root

__all__ = [
    "Limits",
    "Stopped",
    "edit_file",
    "glob_paths",
    "grep",
    "list_dir",
    "read_file",
    "write_file",
]

Check = Callable[[], None]

_PROBE = 8192
"""Bytes looked at to tell a binary file (a NUL byte among them) from text."""
_GREP_LINE_CHARS = 400
"""Characters of one matching line that ``grep`` shows."""
_GREP_MAX_FILE = 32 * 1024 * 1024
"""Files larger than this are not searched by ``grep`` (the output says so)."""
_SEEK_CHUNK = 1 << 16


class Stopped(Exception):
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


def _quote(path: str) -> str:
    return f'"{path}"'


def _stat(root: Root, path: str, real: str) -> os.stat_result:
    try:
        return os.stat(real)
    except FileNotFoundError:
        raise FsError(f"{_quote(path)} does not exist (in {root.path})") from None
    except PermissionError:
        raise FsError(f"{_quote(path)}: permission denied") from None


def _is_binary(head: bytes) -> bool:
    return b"\0" in head


# -- read_file -----------------------------------------------------------------------------


def read_file(
    root: Root, path: str, offset: int, limit: int | None, limits: Limits, check: Check
) -> str:
    """Lines ``offset``... of a text file, at most ``limit`` lines and
    ``limits.max_read_bytes`` bytes, with a marker saying where to go on when cut."""
    real = root.resolve(path)
    name = root.relative(real)
    info = _stat(root, path, real)
    if stat.S_ISDIR(info.st_mode):
        raise FsError(f"{_quote(name)} is a directory; use list_dir or glob to see what it holds")
    if not stat.S_ISREG(info.st_mode):
        raise FsError(f"{_quote(name)} is not a regular file")
    lines_wanted = min(limit or limits.max_read_lines, limits.max_read_lines)
    max_bytes = limits.max_read_bytes
    with open(real, "rb") as handle:
        if _is_binary(handle.read(_PROBE)):
            raise FsError(
                f"{_quote(name)} looks like a binary file ({info.st_size} bytes); not shown"
            )
        handle.seek(0)
        reached, lines_before = _seek_line(handle, offset, check)
        data = handle.read(max_bytes + 1) if reached else b""
    if not data:
        if offset == 1:
            return "(the file is empty)"
        raise FsError(
            f"offset {offset} is past the end of {_quote(name)}, which has {lines_before} lines"
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
        return (
            f"{text}\n[truncated: line {offset} is longer than {max_bytes} bytes; showed its"
            f" first {max_bytes} bytes; read on with offset={offset + 1}]"
        )
    text = b"\n".join(shown).decode("utf-8", "replace")
    last = offset + len(shown) - 1
    if len(pieces) > lines_wanted:
        return (
            f"{text}\n[truncated: showed lines {offset}-{last} (a limit of {lines_wanted} lines);"
            f" the file goes on: read on with offset={last + 1}]"
        )
    if cut:
        return (
            f"{text}\n[truncated: showed lines {offset}-{last} (a limit of {max_bytes} bytes per"
            f" call); the file goes on: read on with offset={last + 1}]"
        )
    return text


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
    info = _stat(root, path, real)
    if not stat.S_ISDIR(info.st_mode):
        raise FsError(f"{_quote(name)} is not a directory; use read_file to read a file")
    try:
        with os.scandir(real) as scan:
            entries = sorted(scan, key=lambda e: e.name)
    except PermissionError:
        raise FsError(f"{_quote(name)}: permission denied") from None
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


def _walk(
    root: Root, base: str, limits: Limits, check: Check, max_depth: int | None = None
) -> Iterator[tuple[str, str, bool]]:
    """``(real path, path relative to base, is a directory)`` below ``base``, top-down in
    name order; symlinked directories are not entered, entries that resolve outside the
    root are left out, ``skip_dirs`` are not descended into."""
    for directory, dirnames, filenames in os.walk(base, followlinks=False):
        check()
        relative_dir = os.path.relpath(directory, base)
        prefix = "" if relative_dir == "." else relative_dir.replace(os.sep, "/") + "/"
        depth = 0 if not prefix else prefix.count("/")
        dirnames.sort()
        kept: list[str] = []
        for dirname in dirnames:
            full = os.path.join(directory, dirname)
            if os.path.islink(full):
                if root.contains(os.path.realpath(full)):
                    yield full, prefix + dirname, True
                continue
            yield full, prefix + dirname, True
            if dirname not in limits.skip_dirs:
                kept.append(dirname)
        dirnames[:] = kept if max_depth is None or depth < max_depth else []
        for filename in sorted(filenames):
            full = os.path.join(directory, filename)
            if os.path.islink(full) and not root.contains(os.path.realpath(full)):
                continue
            yield full, prefix + filename, False


def _directory(root: Root, path: str) -> tuple[str, str]:
    real = root.resolve(path)
    name = root.relative(real)
    info = _stat(root, path, real)
    if not stat.S_ISDIR(info.st_mode):
        raise FsError(f"{_quote(name)} is not a directory")
    return real, name


# -- glob ----------------------------------------------------------------------------------


def glob_paths(root: Root, pattern: str, path: str, limits: Limits, check: Check) -> str:
    """Paths below ``path`` matching ``pattern``, relative to the root (directories
    end in ``/``)."""
    base, base_name = _directory(root, path)
    regex = compile_glob(check_glob(pattern))
    max_depth = None if "**" in pattern else pattern.count("/")
    paths: list[str] = []
    truncated = False
    for real, relative, is_dir in _walk(root, base, limits, check, max_depth):
        if not regex.match(relative):
            continue
        if len(paths) >= limits.max_results:
            truncated = True
            break
        paths.append(root.relative(real).replace(os.sep, "/") + ("/" if is_dir else ""))
    if not paths:
        where = "the working directory" if base_name == "." else _quote(base_name)
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
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise FsError(f"invalid regular expression {pattern!r}: {exc}") from None
    matcher = _file_matcher(file_glob)
    real = root.resolve(path)
    name = root.relative(real)
    info = _stat(root, path, real)
    wanted = min(max_matches or limits.max_matches, limits.max_matches)
    files: Iterator[tuple[str, str, bool]]
    if stat.S_ISDIR(info.st_mode):
        files = _walk(root, real, limits, check)
    else:
        files = iter([(real, os.path.basename(real), False)])
    out = _Output(limits.max_output_bytes)
    matches = 0
    skipped_large: list[str] = []
    stopped = False
    for file_real, relative, is_dir in files:
        if is_dir or (matcher is not None and not matcher(relative)):
            continue
        shown_name = root.relative(file_real).replace(os.sep, "/")
        for number, text in _matching_lines(file_real, regex, check, skipped_large, shown_name):
            if matches >= wanted or not out.add(f"{shown_name}:{number}:{text}"):
                stopped = True
                break
            matches += 1
        if stopped:
            break
    where = "the working directory" if name == "." else _quote(name)
    notes: list[str] = []
    if skipped_large:
        listed = ", ".join(skipped_large[:5]) + (" ..." if len(skipped_large) > 5 else "")
        notes.append(f"[not searched: files larger than {_GREP_MAX_FILE} bytes: {listed}]")
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
    regex = compile_glob(check_glob(file_glob))
    if "/" in file_glob:
        return lambda relative: regex.match(relative) is not None
    return lambda relative: regex.match(relative.rsplit("/", 1)[-1]) is not None


def _matching_lines(
    real: str, regex: re.Pattern[str], check: Check, skipped_large: list[str], shown_name: str
) -> Iterator[tuple[int, str]]:
    try:
        if os.path.getsize(real) > _GREP_MAX_FILE:
            skipped_large.append(shown_name)
            return
        with open(real, "rb") as handle:
            if _is_binary(handle.read(_PROBE)):
                return
            handle.seek(0)
            for number, raw in enumerate(handle, 1):
                if number % 4096 == 0:
                    check()
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if regex.search(line):
                    if len(line) > _GREP_LINE_CHARS:
                        line = line[:_GREP_LINE_CHARS] + "…"
                    yield number, line
    except OSError:
        return  # unreadable (permissions, vanished): not a match


# -- write_file / edit_file ----------------------------------------------------------------


def write_file(root: Root, path: str, content: str) -> str:
    """Create or replace a file with ``content`` (UTF-8), creating parent directories."""
    real = root.resolve(path)
    name = root.relative(real)
    if real == root.path or os.path.isdir(real):
        raise FsError(f"{_quote(name)} is a directory; give a file path")
    existed = os.path.exists(real)
    data = content.encode("utf-8")
    try:
        os.makedirs(os.path.dirname(real), exist_ok=True)
        with open(real, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise FsError(f"cannot write {_quote(name)}: {exc.strerror or exc}") from None
    state = "replaced" if existed else "new file"
    return f"Wrote {len(data)} bytes to {name} ({state})"


def edit_file(root: Root, path: str, old: str, new: str, replace_all: bool) -> str:
    """Replace the exact text ``old`` by ``new`` in a file: ``old`` must occur exactly
    once unless ``replace_all``."""
    if not old:
        raise FsError("old_string is empty; give the exact text to replace")
    if old == new:
        raise FsError("old_string and new_string are the same; nothing would change")
    real = root.resolve(path)
    name = root.relative(real)
    info = _stat(root, path, real)
    if not stat.S_ISREG(info.st_mode):
        raise FsError(f"{_quote(name)} is not a regular file")
    try:
        with open(real, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise FsError(f"cannot read {_quote(name)}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FsError(f"{_quote(name)} is not UTF-8 text; edit_file edits text files") from None
    count = text.count(old)
    if not count and "\r\n" in text and "\n" in old and "\r\n" not in old:
        # the file has Windows line endings, the model wrote Unix ones
        crlf_old = old.replace("\n", "\r\n")
        if text.count(crlf_old):
            old, new = crlf_old, new.replace("\r\n", "\n").replace("\n", "\r\n")
            count = text.count(old)
    if not count:
        raise FsError(
            f"old_string was not found in {_quote(name)}; read the file and copy the text"
            " exactly, with its whitespace and indentation"
        )
    if count > 1 and not replace_all:
        lines = _occurrence_lines(text, old)
        shown = ", ".join(map(str, lines[:10])) + (", ..." if len(lines) > 10 else "")
        raise FsError(
            f"old_string occurs {count} times in {_quote(name)} (lines {shown}); include more"
            " of the surrounding text to make it unique, or set replace_all to replace"
            " every occurrence"
        )
    first_line = text.count("\n", 0, text.index(old)) + 1
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    try:
        with open(real, "wb") as handle:
            handle.write(updated.encode("utf-8"))
    except OSError as exc:
        raise FsError(f"cannot write {_quote(name)}: {exc.strerror or exc}") from None
    if count == 1:
        return f"Edited {name}: replaced 1 occurrence (line {first_line})"
    return f"Edited {name}: replaced {count} occurrences (first at line {first_line})"


def _occurrence_lines(text: str, old: str) -> Sequence[int]:
    lines: list[int] = []
    start = text.find(old)
    while start != -1:
        lines.append(text.count("\n", 0, start) + 1)
        start = text.find(old, start + len(old))
    return lines
