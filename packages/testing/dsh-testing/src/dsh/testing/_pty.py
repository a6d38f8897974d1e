"""A command on a pseudo-terminal, as a user's terminal runs it (see :class:`PtyProcess`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["ANSI", "PtyProcess"]

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""A CSI escape sequence (colours, cursor moves, line erases)."""


class PtyProcess:
    """``argv`` run in ``cwd`` with exactly ``env``, on a pseudo-terminal of 40 rows and
    120 columns that is its stdin, stdout and stderr.

    :attr:`raw` holds every byte it wrote so far (read by :meth:`wait_for` and
    :meth:`finish`); :meth:`close` ends it if it still runs (for a test's clean-up).
    """

    def __init__(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> None:
        argv = list(argv)
        pid, fd = pty.fork()
        if pid == 0:  # the child: exec at once
            try:
                os.chdir(cwd)
                os.execve(argv[0], argv, dict(env))
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.raw = b""
        self.status: int | None = None
        self._closed = False

    @property
    def text(self) -> str:
        """What it wrote so far, decoded (escape sequences kept)."""
        return self.raw.decode("utf-8", "replace")

    @property
    def plain(self) -> str:
        """What it wrote so far, without :data:`ANSI` escape sequences."""
        return ANSI.sub("", self.text)

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            return False
        if not data:
            return False
        self.raw += data
        return True

    def wait_for(self, pattern: str, timeout: float = 20) -> None:
        """Read until :attr:`plain` holds ``pattern``; AssertionError (with the output)
        after ``timeout`` seconds or when the terminal closes first."""
        deadline = time.monotonic() + timeout
        while pattern not in self.plain:
            if time.monotonic() > deadline or not self._read(0.1):
                raise AssertionError(f"{pattern!r} never appeared in:\n{self.raw!r}")

    def send(self, data: bytes) -> None:
        """Type ``data`` on the terminal."""
        os.write(self.fd, data)

    def finish(self, timeout: float = 30, *, keep_open: bool = False) -> int:
        """Read until the process exits (SIGKILL after ``timeout`` seconds) and return its
        exit status (negative: killed by that signal); the terminal is closed unless
        ``keep_open`` (then :meth:`close` closes it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._read(0.1):
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                while self._read(0.05) and select.select([self.fd], [], [], 0)[0]:
                    pass
                self.status = os.waitstatus_to_exitcode(status)
                break
        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            _, status = os.waitpid(self.pid, 0)
            self.status = os.waitstatus_to_exitcode(status)
        if not keep_open:
            self.close()
        return self.status

    def close(self) -> None:
        """SIGKILL the process if it was not waited for, and close the terminal (again: a
        no-op)."""
        if self.status is None:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(self.pid, signal.SIGKILL)
                _, status = os.waitpid(self.pid, 0)
                self.status = os.waitstatus_to_exitcode(status)
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):
                os.close(self.fd)
