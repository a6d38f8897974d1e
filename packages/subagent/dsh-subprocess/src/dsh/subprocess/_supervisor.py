"""This process's watchdog and its run tags: what makes "no child outlives its run"
hold even when this process is killed outright.

The first child started through :class:`~dsh.subprocess.ChildProcess` starts the
watchdog (:mod:`dsh.subprocess._watchdog`): a ~10 ms, stdlib-only Python process
in a session of its own, reading a pipe from this process. Every child's process
group is registered with it, and every child carries a tag chain naming this
process as owner. When this process dies, however it dies, the pipe closes and
the watchdog kills the registered groups and every process carrying this owner's
tags (the product's own tool processes included, in whatever session they put
themselves). This process exiting normally closes the pipe too: the watchdog then
kills whatever is still tagged (normally nothing) and exits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path

from dsh.subprocess._scan import TAG_VARIABLE, owner_of_this_process, proc_available, sweep

__all__ = ["WATCHDOG_MARK", "RunTag", "Watchdog", "sweep_off_loop", "watchdog"]

_log = logging.getLogger("dsh.subprocess")

WATCHDOG_MARK = "dsh-watchdog"
"""The watchdog's first argument (how ``ps`` and test kits recognise it)."""
_SOURCE_VARIABLE = "DSH_WATCHDOG_SOURCE"
_BOOT = f"import os,sys;del sys.argv[1];exec(os.environ.pop({_SOURCE_VARIABLE!r}))"


class Watchdog:
    """The client side of this process's watchdog (one per process; see :func:`watchdog`)."""

    def __init__(self) -> None:
        self.owner = owner_of_this_process()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._pid = os.getpid()
        self._failed = False
        self._groups: set[int] = set()
        """Registered groups (a watchdog started again gets them all)."""
        self._at_exit = False

    @property
    def pid(self) -> int | None:
        """The watchdog's pid once started."""
        return self._process.pid if self._process is not None else None

    def ensure_started(self) -> None:
        """Start the watchdog if it is not running (blocking: call from a thread or
        accept a few ms; thread-safe)."""
        with self._lock:
            if os.getpid() != self._pid:  # forked: a new process needs its own
                self.__init__()  # type: ignore[misc]
            process = self._process
            if process is not None and process.poll() is None:
                return
            if self._failed:
                return
            here = Path(__file__).parent
            source = (here / "_scan.py").read_text() + "\n" + (here / "_watchdog.py").read_text()
            try:
                self._process = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _BOOT, WATCHDOG_MARK, self.owner],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    close_fds=True,
                    cwd="/",  # keeps no directory of ours busy
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), _SOURCE_VARIABLE: source},
                )
            except OSError as exc:
                self._failed = True
                _log.warning("could not start the dsh process watchdog: %s", exc)
                return
            for pgid in self._groups:  # a watchdog that died took its list along
                self._send(f"group {pgid}")
            if not self._at_exit:
                self._at_exit = True
                atexit.register(self.close)

    def _send(self, line: str) -> bool:
        """Write one command (the caller holds the lock); False if nobody reads it."""
        process = self._process
        if process is None or process.stdin is None or os.getpid() != self._pid:
            return False
        try:
            process.stdin.write(line.encode() + b"\n")
            process.stdin.flush()
        except (OSError, ValueError):
            return False
        return True

    def add_group(self, pgid: int) -> None:
        """Kill process group ``pgid`` if this process dies."""
        self.ensure_started()
        with self._lock:
            self._groups.add(pgid)
            self._send(f"group {pgid}")

    def remove_group(self, pgid: int) -> None:
        """Forget group ``pgid`` (its leader was reaped)."""
        with self._lock:
            if pgid in self._groups:
                self._groups.discard(pgid)
                self._send(f"ungroup {pgid}")

    def sweep_later(self, element: str) -> None:
        """Have the watchdog kill every process tagged ``element`` (without waiting).

        Without a running watchdog, a background thread of this process does it."""
        with self._lock:
            sent = self._send(f"sweep {element}")
        if not sent and proc_available():
            threading.Thread(
                target=_sweep_quietly, args=([element],), name="dsh-sweep", daemon=True
            ).start()

    def close(self) -> None:
        """This process is exiting: the watchdog kills whatever is still tagged with
        this owner (normally nothing) and exits. Does not wait for it."""
        with self._lock:
            process, self._process = self._process, None
        if process is None or os.getpid() != self._pid:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
        except (OSError, ValueError):
            pass


_watchdog: Watchdog | None = None
_watchdog_lock = threading.Lock()


def watchdog() -> Watchdog:
    """This process's watchdog client (not started until a child needs it)."""
    global _watchdog
    with _watchdog_lock:
        if _watchdog is None or _watchdog._pid != os.getpid():
            _watchdog = Watchdog()
        return _watchdog


def _sweep_quietly(elements: Iterable[str]) -> int:
    try:
        return sweep(elements=elements)
    except Exception:  # a sweep is a safety net: never a reason to fail
        _log.warning("sweeping %s failed", list(elements), exc_info=True)
        return 0


class _SweepQueue:
    """Tag sweeps off the event loop, batched: teardowns that wait at the same time
    share one thread and one pass over ``/proc`` (200 concurrent teardowns cost a few
    scans, not 200, and the loop thread does not fight 200 threads for the GIL)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[str, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._worker: threading.Thread | None = None

    async def sweep(self, elements: Iterable[str]) -> None:
        loop = asyncio.get_running_loop()
        waiters: list[asyncio.Future[None]] = []
        with self._lock:
            for element in elements:
                future: asyncio.Future[None] = loop.create_future()
                self._pending.append((element, loop, future))
                waiters.append(future)
            if waiters and self._worker is None:
                self._worker = threading.Thread(target=self._work, name="dsh-sweep", daemon=True)
                self._worker.start()
        if waiters:
            await asyncio.gather(*waiters)

    def _work(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._worker = None
                    return
            _sweep_quietly({element for element, _loop, _future in batch})
            for _element, loop, future in batch:
                with contextlib.suppress(RuntimeError):  # that loop is closed
                    loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_sweeps = _SweepQueue()


def _after_fork() -> None:
    global _sweeps
    _sweeps = _SweepQueue()  # the worker thread did not come along


os.register_at_fork(after_in_child=_after_fork)


async def sweep_off_loop(*elements: str) -> None:
    """SIGKILL every process whose tag chain holds one of ``elements``, in a worker
    thread shared by every sweep waiting at the same time; returns when it is done.
    A cancelled caller does not stop the sweep."""
    if proc_available():
        await asyncio.shield(_sweeps.sweep(elements))


_run_numbers = itertools.count(1)
_session = uuid.uuid4().hex[:8]


class RunTag:
    """The tag of one run's process tree: an element appended to the inherited chain.

    ``env`` is the entry to put into the child's environment: the chain this process
    inherited (if it is itself a tagged child) plus this run's element, so sweeping
    any level above also finds this run's processes.
    """

    __slots__ = ("chain", "element")

    def __init__(self, inherited: str | None = None) -> None:
        owner = watchdog().owner
        self.element = f"{owner}/{_session}-{next(_run_numbers)}"
        """This run's element: ``<owner>/<unique run>``."""
        parent = os.environ.get(TAG_VARIABLE, "") if inherited is None else inherited
        self.chain = f"{parent}:{self.element}" if parent else self.element

    @property
    def env(self) -> dict[str, str]:
        """The environment entry carrying the chain."""
        return {TAG_VARIABLE: self.chain}

    def pids(self) -> list[int]:
        """Live processes carrying this run's element (blocking /proc scan)."""
        from dsh.subprocess._scan import matching

        return matching(elements=[self.element])

    def sweep(self) -> int:
        """SIGKILL every process of this run's tree (blocking; run it in a thread
        from async code). Returns how many kills were sent."""
        if not proc_available():
            return 0
        return sweep(elements=[self.element])

    def sweep_later(self) -> None:
        """Have the watchdog sweep this run's tree (returns at once)."""
        watchdog().sweep_later(self.element)

    def __repr__(self) -> str:
        return f"<RunTag {self.element}>"
