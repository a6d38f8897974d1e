"""Ctrl-C and SIGTERM for commands that run agents: the first signal cancels the work
(the context then disposes every child on its way out); a second Ctrl-C stops at
once (``KeyboardInterrupt``, which ``dsh`` reports as ``dsh: interrupted``)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

__all__ = ["Interrupt"]


class Interrupt:
    """Turns SIGINT / SIGTERM into cancelling one scope, once."""

    def __init__(self) -> None:
        self.signal: int | None = None
        """The signal that interrupted the work, or None."""
        self._scope: anyio.CancelScope | None = None

    def stop(self, signum: int) -> None:
        """Cancel the work as if ``signum`` had arrived (first call wins); e.g.
        ``SIGPIPE`` when the reader of the output went away."""
        if self.signal is None:
            self.signal = signum
            if self._scope is not None:
                self._scope.cancel()

    @property
    def exit_status(self) -> int:
        """128 + the signal number (130 for Ctrl-C, 143 for SIGTERM); 0 if none came."""
        return 128 + self.signal if self.signal is not None else 0

    @contextmanager
    def catching(self, scope: anyio.CancelScope) -> Iterator[None]:
        """While inside, a SIGINT or SIGTERM cancels ``scope``."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []

        self._scope = scope
        if self.signal is not None:  # stopped before the work began
            scope.cancel()

        def on_signal(signum: int) -> None:
            self.stop(signum)
            # From now on the defaults apply: a second Ctrl-C raises KeyboardInterrupt.
            for sig in list(installed):
                loop.remove_signal_handler(sig)
                installed.remove(sig)

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # not the main thread, or no signal support here
            installed.append(sig)
        try:
            yield
        finally:
            self._scope = None
            for installed_sig in installed:
                loop.remove_signal_handler(installed_sig)
