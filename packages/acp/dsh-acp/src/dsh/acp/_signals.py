"""SIGINT, SIGTERM and SIGHUP for ``dsh acp``.

The **first** signal calls back in the event loop (``dsh acp`` ends its input: every
turn is cancelled, every delegation disposed, exit 128 + the signal). A **second**
signal, or the work still not ended :data:`GRACE` seconds after the first, ends the
process at once (``os._exit``, same status) after saying ``dsh acp: interrupted``.
The handlers are Python-level ones (not ``loop.add_signal_handler``): they run in the
main thread between bytecodes, so synchronous code that blocks the loop (a plugin
that sleeps or spins) still sees the second signal, and the grace timer is a thread.
Child processes are not left behind: the ``dsh.subprocess`` watchdog process kills
every child tree of a dsh process that ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["GRACE", "StopSignals"]

GRACE = 1.0
"""Seconds the work has, after the first signal, to end before the process exits
regardless."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """The first stop signal calls back once; a second, or :data:`GRACE` seconds, end
    the process (see the module docstring)."""

    def __init__(self, *, message: str, grace: float = GRACE) -> None:
        self._message = message
        self._grace = grace
        self._first: int | None = None
        self._count = 0
        self._callback: Callable[[int], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._forcing = threading.Lock()

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Handle the signals while inside (main thread only; elsewhere a no-op). Once a
        signal came, the handlers stay until the process ends."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {number: signal.signal(number, self._on_signal) for number in _SIGNALS}
        try:
            yield
        finally:
            if self._first is None:
                for number, handler in previous.items():
                    signal.signal(number, handler)

    @contextmanager
    def calling(self, callback: Callable[[int], None]) -> Iterator[None]:
        """While inside (in the running loop), the first signal calls ``callback(signum)``
        in the loop; a signal that came before is passed on at once."""
        self._loop = asyncio.get_running_loop()
        self._callback = callback
        try:
            if self._first is not None:
                callback(self._first)
            yield
        finally:
            self._callback = None
            self._loop = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._count += 1
        if self._count > 1:
            self._force(signum)
            return
        self._first = signum
        timer = threading.Timer(self._grace, self._force, args=(signum,))
        timer.daemon = True
        timer.start()
        loop, callback = self._loop, self._callback
        if loop is not None and callback is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to call
                loop.call_soon_threadsafe(callback, signum)

    def _force(self, signum: int) -> None:
        """End the process now: the line said, 128 + the first signal."""
        if not self._forcing.acquire(blocking=False):
            return
        with contextlib.suppress(OSError):
            os.write(2, f"{self._message}\n".encode())
        os._exit(128 + (self._first or signum))
