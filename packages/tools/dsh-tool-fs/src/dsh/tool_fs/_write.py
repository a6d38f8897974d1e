"""``write_file`` and ``edit_file``: guarded, and written through a rename.

Before anything is written the target is checked against the agent's sandbox policy
(:meth:`dsh.core.permissions.SandboxPolicy.write_refusal`: read-only mode, outside the writable
directories, ``.git``/``.dsh``, the preset files the context loaded), unless the row's
``allow_write`` lists it. The new content goes to a temporary file in the same
directory, which then replaces the target with :func:`os.replace`: the target is never
opened for writing, so a hard link or an open descriptor never sees a truncated or
half-written file, and a crash leaves the old content or the new one. The temporary
file is flushed to disk (``fsync``) before the rename so that the new name never
points at content that is not there yet. The file keeps its mode (and its owner, when
that is allowed); a new file gets ``0666`` less the umask, as ``open()`` would give it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache

from dsh.core.permissions import SandboxPolicy
from dsh.tool_fs._files import open_regular, quote, refuse_kind
from dsh.tool_fs._paths import FsError, Root

__all__ = ["WriteGuard", "edit_file", "write_file"]


@dataclass(frozen=True, slots=True)
class WriteGuard:
    """What one call may write: the agent's policy narrowed by the row, and the row's
    ``allow_write`` paths (absolute)."""

    policy: SandboxPolicy
    allow: tuple[str, ...] = ()

    @classmethod
    def of(cls, policy: SandboxPolicy, root: str, allow: Iterable[str]) -> WriteGuard:
        """A guard with ``allow`` taken relative to ``root`` (absolute paths as they are)."""
        return cls(policy, tuple(os.path.join(root, path) for path in allow))

    def check(self, root: Root, path: str, name: str) -> None:
        """:class:`FsError` saying why writing ``path`` is refused, if it is."""
        lexical = os.path.normpath(path if os.path.isabs(path) else os.path.join(root.path, path))
        reason = self.policy.write_refusal(lexical, cwd=root.path, allow=self.allow)
        if reason is not None:
            raise FsError(f"writing {quote(name)} is refused: {reason}")


def write_file(root: Root, path: str, content: str, guard: WriteGuard) -> str:
    """Create or replace a file with ``content`` (UTF-8), creating parent directories."""
    real = root.resolve(path)
    name = root.relative(real)
    if real == root.path or os.path.isdir(real):
        raise FsError(f"{quote(name)} is a directory; give a file path")
    guard.check(root, path, name)
    try:
        info: os.stat_result | None = os.lstat(real)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise FsError(f"cannot write {quote(name)}: {exc.strerror or exc}") from None
    if info is not None:
        refuse_kind(name, info, action="write")
    data = content.encode("utf-8")
    try:
        os.makedirs(os.path.dirname(real), exist_ok=True)
    except OSError as exc:
        raise FsError(f"cannot write {quote(name)}: {exc.strerror or exc}") from None
    _replace(real, name, data, info)
    state = "replaced" if info is not None else "new file"
    return f"Wrote {len(data)} bytes to {name} ({state})"


def edit_file(
    root: Root, path: str, old: str, new: str, replace_all: bool, guard: WriteGuard
) -> str:
    """Replace the exact text ``old`` by ``new`` in a file: ``old`` must occur exactly
    once unless ``replace_all``."""
    if not old:
        raise FsError("old_string is empty; give the exact text to replace")
    if old == new:
        raise FsError("old_string and new_string are the same; nothing would change")
    real = root.resolve(path)
    name = root.relative(real)
    guard.check(root, path, name)
    handle, info = open_regular(root, path, real, name)
    try:
        with handle:
            raw = handle.read()
    except OSError as exc:
        raise FsError(f"cannot read {quote(name)}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FsError(f"{quote(name)} is not UTF-8 text; edit_file edits text files") from None
    count = text.count(old)
    if not count and "\r\n" in text and "\n" in old and "\r\n" not in old:
        # the file has Windows line endings, the model wrote Unix ones
        crlf_old = old.replace("\n", "\r\n")
        if text.count(crlf_old):
            old, new = crlf_old, new.replace("\r\n", "\n").replace("\n", "\r\n")
            count = text.count(old)
    if not count:
        raise FsError(
            f"old_string was not found in {quote(name)}; read the file and copy the text"
            " exactly, with its whitespace and indentation"
        )
    if count > 1 and not replace_all:
        lines = _occurrence_lines(text, old)
        shown = ", ".join(map(str, lines[:10])) + (", ..." if len(lines) > 10 else "")
        raise FsError(
            f"old_string occurs {count} times in {quote(name)} (lines {shown}); include more"
            " of the surrounding text to make it unique, or set replace_all to replace"
            " every occurrence"
        )
    first_line = text.count("\n", 0, text.index(old)) + 1
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    _replace(real, name, updated.encode("utf-8"), info)
    if count == 1:
        return f"Edited {name}: replaced 1 occurrence (line {first_line})"
    return f"Edited {name}: replaced {count} occurrences (first at line {first_line})"


def _replace(real: str, name: str, data: bytes, info: os.stat_result | None) -> None:
    """Write ``data`` to a temporary file next to ``real`` and rename it over ``real``."""
    directory, base = os.path.split(real)
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{base}.", suffix=".dsh-tmp", dir=directory)
    except OSError as exc:
        raise FsError(
            f"cannot write {quote(name)}: {exc.strerror or exc} (dsh writes a temporary file"
            " in the same directory and renames it, so the directory must be writable)"
        ) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            _keep_mode(handle.fileno(), info)
            os.fsync(handle.fileno())
        os.replace(temporary, real)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise FsError(f"cannot write {quote(name)}: {exc.strerror or exc}") from None
        raise


def _keep_mode(fd: int, info: os.stat_result | None) -> None:
    """Give the new file the mode (and, when allowed, the owner) of the old one; a new
    file gets what ``open()`` would have given it."""
    if info is None:
        os.fchmod(fd, 0o666 & ~_umask())
        return
    if (info.st_uid, info.st_gid) != (os.getuid(), os.getgid()):
        with contextlib.suppress(OSError):  # not ours to give away: it stays the caller's
            os.fchown(fd, info.st_uid, info.st_gid)
    os.fchmod(fd, stat.S_IMODE(info.st_mode))


@cache
def _umask() -> int:
    """The process's umask, read without changing it where the system allows."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no /proc (macOS): read it by setting it, and put it back
    os.umask(mask)
    return mask


def _occurrence_lines(text: str, old: str) -> Sequence[int]:
    lines: list[int] = []
    start = text.find(old)
    while start != -1:
        lines.append(text.count("\n", 0, start) + 1)
        start = text.find(old, start + len(old))
    return lines
