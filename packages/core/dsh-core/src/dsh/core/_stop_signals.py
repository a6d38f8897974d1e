"""The signals that ask a long-running dsh process (a server, a worker) to stop.

SIGTERM (a service manager), SIGINT (Ctrl-C) and SIGHUP (the terminal closed, or the
session that started the process ended) all mean the same: stop, cleanly. Servers
install one callback for the three with :func:`on_stop_signals`, so a hang-up is never
the default action (the process killed mid-teardown, its work left open).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["STOP_SIGNALS", "on_stop_signals"]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""SIGTERM, SIGINT and SIGHUP: each asks for a clean stop."""


@contextmanager
def on_stop_signals(callback: Callable[[int], None]) -> Iterator[None]:
    """While inside, each of :data:`STOP_SIGNALS` calls ``callback(signum)`` in the
    running asyncio loop (every time it arrives: a second signal is the caller's to
    treat as "hurry"); no ``KeyboardInterrupt`` is raised. Keep the teardown inside, so
    a signal during it reaches the callback too. On the way out the handlers that were
    there before are put back. Main thread of a running loop only."""
    loop = asyncio.get_running_loop()
    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    installed: list[signal.Signals] = []
    try:
        for number in STOP_SIGNALS:
            loop.add_signal_handler(number, callback, int(number))
            installed.append(number)
        yield
    finally:
        for number in installed:
            loop.remove_signal_handler(number)
            handler = previous[number]
            if handler is not None:
                signal.signal(number, handler)
