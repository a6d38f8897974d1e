"""SIGINT, SIGTERM and SIGHUP for commands that run agents (``dsh run``, ``dsh demo``,
``dsh acp``).

* The **first** signal cancels the work: the event loop is woken and the run's cancel
  scope cancelled (or, for ``dsh acp``, a callback run); the context then disposes
  every child on its way out, the command says ``dsh: interrupted`` and exits with
  128 + the signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
* A **second** signal, or the work still not ended :data:`GRACE` seconds after the
  first, ends the process at once (``os._exit``) with the same status, after putting
  the terminal back (an approval prompt's single-key mode) and saying
  ``dsh: interrupted`` if that was not said yet. This does not depend on the event
  loop: the C-level signal handler writes to a pipe (``signal.set_wakeup_fd``) that a
  watchdog thread reads, so a loop blocked by synchronous code (a plugin that sleeps
  or spins) cannot keep the process alive. Child processes are not left behind: the
  ``dsh.subprocess`` watchdog process kills every child tree of a dsh process that
  ends, however it ends.

The Python-level handlers never raise (no ``KeyboardInterrupt`` can surface in the
middle of cleanup and print a traceback). One limit: code that holds the
interpreter lock for long without checking for signals (a C extension's long call,
a catastrophic regular expression in :mod:`re`) blocks every Python thread; only
SIGKILL ends the process then.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import anyio

__all__ = ["GRACE", "Interrupt", "holding_terminal"]

GRACE = 1.0
"""Seconds the work has, after the first signal, to end before the process exits
regardless."""

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_STOP = 0  # a byte on the pipe that is no signal: the watchdog thread ends
_SEEN = 255  # the Python-level handler saw a signal (starts the grace period)

# Terminals in a mode of ours (fd → attributes to restore), for the forced exit.
_held_terminals: dict[int, list[Any]] = {}


@contextmanager
def holding_terminal(fd: int, saved: list[Any]) -> Iterator[None]:
    """While inside, terminal ``fd`` is in a mode of ours: a forced exit puts ``saved``
    (``termios.tcgetattr``) back first."""
    _held_terminals[fd] = saved
    try:
        yield
    finally:
        _held_terminals.pop(fd, None)


def _restore_terminals() -> None:
    for fd, saved in list(_held_terminals.items()):
        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(fd, termios.TCSANOW, saved)


class Interrupt:
    """Turns SIGINT / SIGTERM / SIGHUP into cancelling one scope (or calling back),
    once; a second signal or :data:`GRACE` seconds end the process."""

    def __init__(self, *, grace: float = GRACE, message: str | None = "dsh: interrupted") -> None:
        self.signal: int | None = None
        """The signal that interrupted the work, or None."""
        self._grace = grace
        self._message = message
        self._announced = False
        self._scope: anyio.CancelScope | None = None
        self._callback: Callable[[int], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._received: int | None = None  # the first signal, as the handlers saw it
        self._handled = 0
        self._pipe: tuple[int, int] | None = None
        self._forcing = threading.Lock()

    # -- the work -----------------------------------------------------------------------

    def stop(self, signum: int) -> None:
        """Cancel the work as if ``signum`` had arrived (first call wins); e.g.
        ``SIGPIPE`` when the reader of the output went away."""
        if self.signal is None:
            self.signal = signum
            if self._scope is not None:
                self._scope.cancel()
            if self._callback is not None:
                self._callback(signum)

    @property
    def exit_status(self) -> int:
        """128 + the signal number (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP); 0 if none."""
        return 128 + self.signal if self.signal is not None else 0

    def announce(self) -> None:
        """Say ``dsh: interrupted`` on stderr (once; a terminal that hung up is fine)."""
        if not self._announced and self._message:
            self._announced = True
            with contextlib.suppress(OSError, ValueError):
                print(self._message, file=sys.stderr, flush=True)

    @contextmanager
    def catching(self, scope: anyio.CancelScope) -> Iterator[None]:
        """While inside, a signal cancels ``scope`` (installs the handlers if
        :meth:`installed` has not)."""
        with self._bound(scope, None):
            yield

    @contextmanager
    def calling(self, callback: Callable[[int], None]) -> Iterator[None]:
        """While inside, a signal calls ``callback(signum)`` in the event loop."""
        with self._bound(None, callback):
            yield

    @contextmanager
    def _bound(
        self, scope: anyio.CancelScope | None, callback: Callable[[int], None] | None
    ) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if self._pipe is None:
                stack.enter_context(self.installed())
            self._loop = asyncio.get_running_loop()
            self._scope, self._callback = scope, callback
            if self.signal is None and self._received is not None:
                self.stop(self._received)  # the signal came before the work began
            elif self.signal is not None:  # stopped before the work began
                if scope is not None:
                    scope.cancel()
                if callback is not None:
                    callback(self.signal)
            try:
                yield
            finally:
                self._scope = self._callback = None

    # -- the process --------------------------------------------------------------------

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Handle the signals while inside (main thread only; elsewhere a no-op). Once
        a signal came, the handlers and the watchdog stay until the process ends."""
        if threading.current_thread() is not threading.main_thread() or self._pipe:
            yield
            return
        read, write = os.pipe()
        os.set_blocking(write, False)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in SIGNALS}
        wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self._pipe = (read, write)
        watchdog = threading.Thread(target=self._watch, args=(read,), name="dsh-signals")
        watchdog.daemon = True
        watchdog.start()
        try:
            yield
        finally:
            signal.set_wakeup_fd(wakeup)
            if self._received is None:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                with contextlib.suppress(OSError):
                    os.write(write, bytes([_STOP]))
                watchdog.join(5)
                os.close(read)
                os.close(write)
                self._pipe = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The Python-level handler (main thread, between bytecodes): the first signal
        cancels the work through the loop, the second ends the process."""
        self._handled += 1
        if self._handled > 1:
            self._force(signum)
        if self._received is None:
            self._received = signum
        if self._pipe is not None:  # start the grace period even if the fd was taken
            with contextlib.suppress(OSError):
                os.write(self._pipe[1], bytes([_SEEN]))
        loop = self._loop
        if loop is None:
            with contextlib.suppress(RuntimeError):
                loop = asyncio.get_running_loop()
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to cancel
                loop.call_soon_threadsafe(self.stop, self._received)

    def _watch(self, read: int) -> None:
        """The watchdog thread: every signal, as the C handler wrote it to the pipe."""
        first_at: float | None = None
        count = 0
        while True:
            timeout = None if first_at is None else first_at + self._grace - time.monotonic()
            if timeout is not None and timeout <= 0:
                self._force(self._received or signal.SIGTERM)
                return
            ready, _, _ = select.select([read], [], [], timeout)
            if not ready:
                continue
            try:
                data = os.read(read, 64)
            except OSError:
                return
            for byte in data:
                if byte == _STOP and self._received is None:
                    return
                if first_at is None:
                    first_at = time.monotonic()
                if byte not in (_STOP, _SEEN):
                    count += 1
                    if self._received is None:
                        self._received = byte
            loop = self._loop
            if loop is not None:  # let the main thread run its handler now
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_nothing)
            if count > 1:
                self._force(self._received or signal.SIGTERM)
                return

    def _force(self, signum: int) -> None:
        """End the process now: terminal restored, the line said, 128 + the signal."""
        if not self._forcing.acquire(blocking=False):
            return
        prompting = bool(_held_terminals)
        _restore_terminals()
        if not self._announced and self._message:
            with contextlib.suppress(OSError):
                os.write(2, f"{chr(10) if prompting else ''}{self._message}\n".encode())
        os._exit(128 + (self.signal or self._received or signum))


def _nothing() -> None:
    return None
