"""The code behind :mod:`dsh.testing.disk` (its docstring says what it is)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["fill_up", "small_tmpfs"]


@contextlib.contextmanager
def small_tmpfs(directory: Path, size: str = "64k") -> Iterator[Path]:
    """Mount a tmpfs of ``size`` on ``directory`` (created if missing) while inside;
    unmounted on the way out. Skips the test when not root or not on Linux."""
    if not sys.platform.startswith("linux"):
        pytest.skip("a tmpfs full disk needs Linux")
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs full disk needs root (CI runs tests as root)")
    mount = shutil.which("mount") or "/bin/mount"
    umount = shutil.which("umount") or "/bin/umount"
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(directory)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    try:
        yield directory
    finally:
        done = subprocess.run([umount, str(directory)], capture_output=True, timeout=30)
        if done.returncode != 0:  # something still holds it open: detach it anyway
            subprocess.run([umount, "-l", str(directory)], capture_output=True, timeout=30)


def fill_up(directory: Path, name: str = "filler", *, leave: int = 0) -> Path:
    """Write ``directory/name`` until the file system has no byte left, then give
    ``leave`` bytes back (4096: one page of a tmpfs, room for one small new file); its
    path. Deleting it gives the room back."""
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (65536, 4096, 512, 64, 1):
            block = b"\0" * chunk
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
        if leave:
            os.ftruncate(fd, max(os.fstat(fd).st_size - leave, 0))
    finally:
        os.close(fd)
    return path
