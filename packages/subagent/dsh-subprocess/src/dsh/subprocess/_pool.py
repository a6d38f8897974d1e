"""Warm process pools: processes started (and handshaken) before the runs that use them.

A :class:`ProcessPool` keeps ``size`` processes started. The transport gives it a
``start`` function (spawn a :class:`~dsh.subprocess.ChildProcess`, ``initialize``...)
returning a :class:`PooledProcess` (the process plus the transport's connection);
a run then :meth:`~ProcessPool.acquire`\\ s one, opens its own session or thread on
it, and :meth:`~ProcessPool.release`\\ s it: back to the pool when the run ended
cleanly, else the process is *recycled* (closed, and a fresh one started in the
background). A process is also recycled after ``max_runs`` runs, when it exits on
its own, and when it has been idle for ``idle_timeout`` seconds.

The rules that keep it honest:

* The pool keeps ``size`` processes, idle or serving runs: a process a run holds
  comes back, so only retired ones are replaced (in the background). A run never
  waits longer than a cold start: with no idle process it claims one that is
  already starting (it is further along) or starts one itself; a caller that gives
  up does not waste it, the process joins the pool when ready. More idle processes
  than ``size`` (runs gave back processes started while every one was busy): the
  ones idle longest are closed.
* The pool's own work (starts, refills, the idle timer, exit watchers) runs in
  tasks with a context of their own, never in a run's: nothing a run leaves behind
  outlives its ``dispose``.
* Every process is a :class:`~dsh.subprocess.ChildProcess` with a
  :class:`~dsh.subprocess.RunTag` of its own, registered with this process's
  watchdog like any child: a parent that dies, however it dies, takes the pool's
  processes (and whatever they started) along.
* :meth:`~ProcessPool.aclose` closes the idle processes and those still starting; a
  process a run holds is closed when the run releases it. Nothing is left after
  the owner (a context) closes.
* Background starts that fail back off (0.5 s doubling to 60 s); a run's own start
  is always tried, and its failure is the run's start failure.
* Every process of a pool runs in the pool's :attr:`~ProcessPool.sandbox` (the
  context's policy narrowed by the provider row, in the pool's cwd): a run whose
  delegating agent has a narrower policy, or that works in another directory, must
  not take one (it would reach further than its parent may); it starts a process of
  its own instead (:meth:`dsh.subprocess.SubprocessRun.usable_pool`). Pools are not
  keyed by policy: a narrowed child is the exception, and a pool per policy would
  keep processes warm for policies seen once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Generic, TypeVar

import anyio

from dsh.subprocess._errors import ProcessStartError
from dsh.subprocess._pooled import PoolClosed, PoolConfig, PooledProcess, Starting
from dsh.subprocess._sandbox import Sandbox

__all__ = ["ProcessPool"]

_log = logging.getLogger("dsh.subprocess.pool")

P = TypeVar("P", bound=PooledProcess)

_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 60.0


class ProcessPool(Generic[P]):
    """Warm processes for runs to take (see the module docstring).

    ``start(starting)`` starts and handshakes one process (calling
    ``starting.track(child)`` once it is spawned) and returns it, or raises; the pool
    bounds it by ``start_timeout``. ``concurrency`` is how many runs may hold one
    process at once. ``env``, ``cwd`` and ``sandbox`` describe what the processes run
    with (a run that needs another environment or a narrower sandbox must not use the
    pool); the start function must start them so.
    """

    def __init__(
        self,
        start: Callable[[Starting], Awaitable[P]],
        config: PoolConfig,
        *,
        name: str,
        env: Mapping[str, str],
        cwd: str,
        sandbox: Sandbox | None = None,
        concurrency: int = 1,
        start_timeout: float = 60.0,
        eof_grace: float = 2.0,
        term_grace: float = 2.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.name = name
        self.config = config
        self.env: Mapping[str, str] = dict(env)
        """The environment every process of the pool runs with."""
        self.cwd = cwd
        """The working directory of the processes (runs choose their own session cwd)."""
        self.sandbox = sandbox
        """The sandbox every process of the pool runs in (None: none)."""
        self.concurrency = concurrency
        self.start_timeout = start_timeout
        self.eof_grace = eof_grace
        self.term_grace = term_grace
        self._start = start
        self._processes: list[P] = []
        self._starts: list[Starting] = []
        self._closing: dict[P, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watchers: dict[P, asyncio.Task[None]] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._closed = False
        self._failures = 0
        self._retry_at = 0.0
        self._retry: asyncio.TimerHandle | None = None
        self.last_failure: str | None = None
        """Why the last start failed (None after a start succeeds)."""
        self.started = 0
        """Processes started so far."""
        self.recycled: Counter[str] = Counter()
        """Processes retired so far, by reason: ``error``, ``cancelled``, ``max_runs``,
        ``exited``, ``idle_timeout``, ``surplus``, ``closed``..."""

    # -- the public side ----------------------------------------------------------------

    def open(self) -> None:
        """Start warming up (and the idle timer). Call on the event loop."""
        if self._closed:
            return
        if self._reaper is None and self.config.idle_timeout > 0:
            self._reaper = self._background(self._reap_idle(), f"{self.name} pool idle timer")
        self._refill()

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` was called."""
        return self._closed

    def pids(self) -> set[int]:
        """Pids of the processes the pool holds and no run is using: idle, starting,
        or closing."""
        pids = {p.pid for p in self._processes if p.active == 0}
        pids.update(p.pid for p in self._closing)
        pids.update(s.child.pid for s in self._starts if s.child is not None)
        return pids

    @property
    def idle(self) -> list[P]:
        """Processes ready for a run, no run holding them."""
        return [p for p in self._processes if self._usable(p) and p.active == p.reserved == 0]

    async def wait_ready(self, count: int | None = None, timeout: float = 60.0) -> None:
        """Wait until ``count`` (default ``size``) processes are idle; ``TimeoutError``
        after ``timeout``, :class:`PoolClosed` if the pool closes, and the start error
        if the pool has nothing starting and its last start failed."""
        wanted = self.config.size if count is None else count
        with anyio.fail_after(timeout):
            while len(self.idle) < wanted:
                if self._closed:
                    raise PoolClosed(f"the {self.name} pool is closed")
                if not self._starts and self.last_failure is not None:
                    raise ProcessStartError(self.last_failure)
                await self._changed.wait()

    async def acquire(self) -> P:
        """A process for one run (see the module docstring); give it back with
        :meth:`release`. Raises the start's error when the process this run waited for
        could not start, :class:`PoolClosed` once the pool is closed."""
        if self._closed:
            raise PoolClosed(f"the {self.name} pool is closed")
        process = self._pick()
        if process is not None:
            self._lease(process)
            self._refill()
            return process
        start = self._claimable() or self._begin_start()
        start.claims += 1
        task = start.task
        assert task is not None
        try:
            claimed: P = await asyncio.shield(task)
        except BaseException as exc:
            if task.done() and not task.cancelled() and task.exception() is None:
                started: P = task.result()  # ready, but this caller gave up: hand it back
                started.reserved -= 1
                self._settle(started)
            else:
                start.claims -= 1
            if task.cancelled() and isinstance(exc, asyncio.CancelledError):
                current = asyncio.current_task()
                if current is not None and current.cancelling() == 0:
                    raise PoolClosed(f"the {self.name} pool closed while starting") from None
            raise
        claimed.reserved -= 1
        self._lease(claimed)
        return claimed

    async def release(self, process: P, *, reuse: bool, reason: str = "error") -> None:
        """A run is done with ``process``: keep it if ``reuse`` (and it is fit), else
        retire it for ``reason``. A process retired that way, or after the pool was
        closed, is stopped before this returns (the run's dispose then ends with it
        gone); one retired for a clean reason (``max_runs``, ``surplus``) closes in the
        background."""
        process.active -= 1
        if not reuse:
            self._retire(process, reason)
        elif not process.alive:
            self._retire(process, "exited")
        elif self._closed:
            self._retire(process, "closed")
        if process.retired is None and process.active == 0:
            process.idle_since = time.monotonic()
        self._trim()
        self._refill()
        self._notify()
        if process.retired is not None and process.active == process.reserved == 0:
            closing = self._close(process)
            if not reuse or self._closed:
                # it may still be at work (or its owner is closing): the run ends once
                # the process is stopped
                await asyncio.shield(closing)

    async def aclose(self) -> None:
        """Close the pool: idle and starting processes now (waited for), held ones when
        their runs release them. Idempotent."""
        if not self._closed:
            self._closed = True
            if self._retry is not None:
                self._retry.cancel()
            for start in self._starts:
                if start.task is not None:
                    start.task.cancel()
            for process in list(self._processes):
                self._retire(process, "closed")
                if process.active == process.reserved == 0:
                    self._close(process)
            if self._reaper is not None:
                self._reaper.cancel()
            self._notify()
        pending = [s.task for s in self._starts if s.task is not None]
        pending += [t for t in self._tasks if t not in self._watchers.values()]
        if pending:
            with anyio.CancelScope(shield=True):
                await asyncio.wait(pending)
        for watcher in self._watchers.values():
            watcher.cancel()

    # -- inside ----------------------------------------------------------------------

    def _usable(self, process: P) -> bool:
        return process.retired is None and process.alive

    def _pick(self) -> P | None:
        best: P | None = None
        best_key: tuple[bool, float] = (False, 0.0)
        for process in self._processes:
            if not self._usable(process):
                continue
            if process.active + process.reserved >= self.concurrency:
                continue
            # pack runs onto busy processes first; else the most recently used one
            key = (process.active > 0, process.idle_since)
            if best is None or key > best_key:
                best, best_key = process, key
        return best

    def _claimable(self) -> Starting | None:
        for start in self._starts:
            if start.claims < self.concurrency:
                return start
        return None

    def _lease(self, process: P) -> None:
        process.active += 1
        process.runs += 1
        if process.runs >= self.config.max_runs:
            self._retire(process, "max_runs")
        self._notify()

    def _settle(self, process: P) -> None:
        """A reservation was given back: the process is idle unless something holds it."""
        if process.active == process.reserved == 0:
            if process.retired is not None:
                self._close(process)
            else:
                process.idle_since = time.monotonic()
        self._notify()

    def _trim(self) -> None:
        """More idle processes than ``size`` (runs gave back processes started while
        they were busy): the ones idle longest go."""
        idle = self.idle
        excess = len(idle) - self.config.size
        if excess > 0:
            for process in sorted(idle, key=lambda p: p.idle_since)[:excess]:
                self._retire(process, "surplus")
                self._close(process)

    def _retire(self, process: P, reason: str) -> None:
        if process.retired is None:
            process.retired = reason
            self.recycled[reason] += 1
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _background(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        # a context of its own: nothing of a run (its mark, its tracing) sticks to it
        task = asyncio.get_running_loop().create_task(
            coro, name=name, context=contextvars.Context()
        )
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            _log.debug("%s pool task %s failed", self.name, task.get_name(), exc_info=error)

    def _refill(self) -> None:
        if self._closed or not self.config.enabled:
            return
        # processes that serve runs count: they come back (a sequential caller must not
        # make the pool start a process per run); retired ones do not
        owned = sum(1 for p in self._processes if self._usable(p)) + len(self._starts)
        missing = self.config.size - owned
        if missing <= 0:
            return
        delay = self._retry_at - time.monotonic()
        if delay > 0:
            if self._retry is None:
                loop = asyncio.get_running_loop()
                self._retry = loop.call_later(delay, self._retry_now)
            return
        for _ in range(missing):
            self._begin_start()

    def _retry_now(self) -> None:
        self._retry = None
        self._refill()

    def _begin_start(self) -> Starting:
        start = Starting()
        self._starts.append(start)
        start.task = self._background(self._run_start(start), f"start {self.name} process")
        self._notify()
        return start

    async def _run_start(self, start: Starting) -> P:
        try:
            with anyio.fail_after(self.start_timeout):
                process = await self._start(start)
        except BaseException as exc:
            self._starts.remove(start)
            if start.child is not None:
                with anyio.CancelScope(shield=True):
                    await start.child.terminate(eof_grace=0.0, term_grace=self.term_grace)
            if isinstance(exc, Exception):
                self._start_failed(exc)
            self._notify()
            if isinstance(exc, TimeoutError):
                raise ProcessStartError(
                    f"{self.name} did not start within start_timeout = {self.start_timeout:g} s"
                ) from exc
            raise
        self._starts.remove(start)
        self._failures = 0
        self._retry_at = 0.0
        self.last_failure = None
        self.started += 1
        process.reserved = start.claims
        process.idle_since = time.monotonic()
        self._processes.append(process)
        self._watchers[process] = self._background(
            self._watch(process), f"watch {self.name} process {process.pid}"
        )
        if self._closed:
            self._retire(process, "closed")
            if process.reserved == 0:
                self._close(process)
        self._trim()
        self._notify()
        return process

    def _start_failed(self, error: Exception) -> None:
        self._failures += 1
        delay = min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        self.last_failure = getattr(error, "message", None) or str(error) or type(error).__name__
        _log.warning(
            "%s pool: a process failed to start (retrying in %g s): %s",
            self.name,
            delay,
            self.last_failure,
        )

    async def _watch(self, process: P) -> None:
        await process.child.wait()
        self._watchers.pop(process, None)  # (its close must not cancel this task)
        self._retire(process, "exited")
        if process.active == process.reserved == 0:
            self._close(process)  # reaps it, closes the pipes
        self._refill()

    def _close(self, process: P) -> asyncio.Task[None]:
        """Close ``process`` in a task of the pool's (one per process; await it to wait)."""
        task = self._closing.get(process)
        if task is None:
            if process in self._processes:
                self._processes.remove(process)
            task = self._closing[process] = self._background(
                self._close_now(process), f"close {self.name} process {process.pid}"
            )
        return task

    async def _close_now(self, process: P) -> None:
        try:
            await process.aclose(eof_grace=self.eof_grace, term_grace=self.term_grace)
        except BaseException:
            _log.warning("%s pool: closing %r failed; killing it", self.name, process)
            process.kill_now()
            raise
        finally:
            del self._closing[process]
            watcher = self._watchers.pop(process, None)
            if watcher is not None:
                watcher.cancel()
            self._notify()

    async def _reap_idle(self) -> None:
        timeout = self.config.idle_timeout
        while not self._closed:
            now = time.monotonic()
            wake: float | None = None
            for process in self.idle:
                deadline = process.idle_since + timeout
                if deadline <= now:
                    self._retire(process, "idle_timeout")
                    self._close(process)
                elif wake is None or deadline < wake:
                    wake = deadline
            self._refill()
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    changed.wait(), None if wake is None else max(0.0, wake - time.monotonic())
                )
