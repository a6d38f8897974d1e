"""What the file tools may open: regular files with one hard link, never a FIFO.

* A FIFO, socket or device is refused by ``read_file``, ``write_file`` and
  ``edit_file`` and skipped by the ``glob`` and ``grep`` walks: opening a FIFO blocks
  until a writer comes (it hung ``grep`` and ``write_file``), a device can be endless.
  The kind is checked with ``lstat`` before the open, the open is non-blocking and
  never follows a symlink, and ``fstat`` confirms the kind after it.
* A regular file with more than one hard link is refused: the other link may be
  outside the working directory (a link made inside it reads and overwrites a file
  elsewhere), and no path check can tell.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from typing import BinaryIO

from dsh.tool_fs._paths import FsError, Root

__all__ = [
    "HardLinked",
    "describe_kind",
    "lstat_of",
    "open_regular",
    "quote",
    "refuse_kind",
    "walk",
]

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


class HardLinked(FsError):
    """A regular file has more than one hard link."""


def quote(path: str) -> str:
    """``"path"``, as messages show paths."""
    return f'"{path}"'


def describe_kind(mode: int) -> str:
    """What a non-regular file is, for messages: ``a FIFO (named pipe)``..."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def lstat_of(root: Root, path: str, real: str) -> os.stat_result:
    """``lstat`` of the resolved ``real``, with errors for the model."""
    try:
        return os.lstat(real)
    except FileNotFoundError:
        raise FsError(f"{quote(path)} does not exist (in {root.path})") from None
    except PermissionError:
        raise FsError(f"{quote(path)}: permission denied") from None


def refuse_kind(name: str, info: os.stat_result, *, action: str) -> None:
    """:class:`FsError` unless ``info`` is a regular file with one hard link."""
    if stat.S_ISDIR(info.st_mode):
        return  # callers word their own message for directories
    if not stat.S_ISREG(info.st_mode):
        raise FsError(
            f"{quote(name)} is {describe_kind(info.st_mode)}; dsh's file tools {action} regular"
            " files only"
        )
    if info.st_nlink > 1:
        raise HardLinked(
            f"{quote(name)} has {info.st_nlink} hard links; dsh does not read or write through"
            " hard links (another link may be a file outside the working directory)"
        )


def open_regular(root: Root, path: str, real: str, name: str) -> tuple[BinaryIO, os.stat_result]:
    """Open the resolved ``real`` for reading: a regular file with one hard link, else
    :class:`FsError` (a FIFO is never opened blocking)."""
    info = lstat_of(root, path, real)
    if stat.S_ISDIR(info.st_mode):
        raise FsError(f"{quote(name)} is a directory; use list_dir or glob to see what it holds")
    refuse_kind(name, info, action="read")
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError as exc:
        raise FsError(f"cannot read {quote(name)}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        refuse_kind(name, info, action="read")
        if stat.S_ISDIR(info.st_mode):
            raise FsError(f"{quote(name)} is a directory")
        return os.fdopen(fd, "rb"), info
    except BaseException:
        os.close(fd)
        raise


def walk(
    root: Root,
    base: str,
    skip_dirs: frozenset[str],
    check: Callable[[], None],
    max_depth: int | None = None,
) -> Iterator[tuple[str, str, bool]]:
    """``(real path, path relative to base, is a directory)`` below ``base``, top-down in
    name order (a directory's entries, then each subdirectory's). Symlinked directories
    are listed but not entered, entries that resolve outside the root and files that
    are not regular (FIFOs, sockets, devices, dangling links) are left out,
    ``skip_dirs`` are not descended into."""
    stack: list[tuple[str, str, int]] = [(base, "", 0)]
    while stack:
        directory, prefix, depth = stack.pop()
        check()
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            continue  # unreadable or vanished, as os.walk does
        descend: list[tuple[str, str, int]] = []
        files: list[tuple[str, str, bool]] = []
        for entry in entries:
            relative = prefix + entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    yield entry.path, relative, True
                    if entry.name not in skip_dirs and (max_depth is None or depth < max_depth):
                        descend.append((entry.path, relative + "/", depth + 1))
                elif entry.is_symlink():
                    target = os.path.realpath(entry.path)
                    if not root.contains(target):
                        continue
                    mode = os.stat(target).st_mode
                    if stat.S_ISDIR(mode):
                        yield entry.path, relative, True
                    elif stat.S_ISREG(mode):
                        files.append((entry.path, relative, False))
                elif entry.is_file(follow_symlinks=False):
                    files.append((entry.path, relative, False))
            except OSError:
                continue
        yield from files
        stack.extend(reversed(descend))
