"""A cross-process lock that keeps a persisted child to one live activation.

Two processes sharing a sessions directory must not both append to the same
child session (its ``seq`` numbers would interleave and the file would no longer
load). An :class:`ActivationLock` is an exclusive ``flock`` on ``<id>.lock``
beside the session file, taken without blocking; the kernel drops it when the
holder exits, however it exits, so a crashed process never leaves a child
locked. Where ``fcntl`` is missing (Windows) the lock always succeeds.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["ActivationLock"]


class ActivationLock:
    """An exclusive, non-blocking lock on ``path`` (created if missing)."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def try_acquire(self) -> str | None:
        """Take the lock; returns None on success, else what the file says about the
        holder (its pid, or ``"unknown"``)."""
        if self._fd is not None:
            return None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                try:
                    holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
                finally:
                    os.close(fd)
                return holder
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return None

    def release(self) -> None:
        """Drop the lock. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the descriptor releases the flock
