"""``dsh worker``: a Temporal worker that runs delegations from a task queue.

The worker opens a dsh context with a preset of its own (the providers that run
children on this host: spawn, acp, codex, claude-code; their model, tools,
permissions), connects to Temporal and polls one task queue for the delegation
workflow and its activity (:mod:`._activity`). ``max_concurrent`` children run at
once: the host's cores by default, since each may be a process tree of builds and
tests.

Stopping: the first SIGTERM (or SIGINT, or SIGHUP: the terminal closed) drains: no
new work is taken, running children get ``grace`` seconds to finish, then they are
disposed and their attempts handed back to Temporal, which runs them again on another
worker; the exit status is 0 whichever of the three asked. A second signal skips the
rest of the grace. Every child's process tree is torn down by this
process (the inner provider's dispose: cancel, then the process group is killed);
if this process is killed outright, its dsh watchdog kills them (the no-orphan
rules), and a worker restarted on the host sweeps what a crashed one left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from dsh.core import Context, Preset
from dsh.core.lifecycle import on_stop_signals
from dsh.subagent import SubagentRuntime
from dsh.subagent_temporal._activity import DelegationActivity, WorkerStats
from dsh.subagent_temporal._config import DEFAULT_TASK_QUEUE
from dsh.subagent_temporal._connect import connect, connect_kwargs, describe_target
from dsh.subagent_temporal._store import DirectoryResultStore, open_store
from dsh.subagent_temporal._workflow import DelegationsWorkflow

__all__ = ["WorkerOptions", "host_capacity", "run_worker"]

_log = logging.getLogger("dsh.subagent_temporal.worker")

_MAX_POLLERS = 10
"""Concurrent polls per task kind (the SDK's default, 5, leaves a fan-out's activities
waiting in the queue while slots are free: half the throughput on a 2-core host)."""


def host_capacity() -> int:
    """The host's capacity for children: the CPUs this process may run on."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13
    if counter is not None:
        count = counter()
        if count:
            return int(count)
    with contextlib.suppress(AttributeError, OSError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass
class WorkerOptions:
    """What a worker runs with (``dsh worker``'s options)."""

    preset: Preset | None = None
    """The worker's preset: the providers, model and tools its children get."""
    task_queue: str = DEFAULT_TASK_QUEUE
    address: str | None = None
    """``host:port`` (default: ``TEMPORAL_ADDRESS`` / profile, else localhost:7233)."""
    namespace: str | None = None
    identity: str | None = None
    """How the worker shows in Temporal (default ``dsh-worker@HOST:PID``)."""
    max_concurrent: int | None = None
    """Children at once (default: :func:`host_capacity`)."""
    grace: float = 30.0
    """Seconds running children get to finish after the first stop signal."""
    result_store: str | None = None
    """Where large prompts and results travel (the parents' ``result_store``)."""
    heartbeat_every: float = 1.0
    """Seconds between heartbeats (also how soon a cancel is seen)."""
    cwd: str | None = None
    """The children's working directory (default: the current one)."""
    sessions_dir: str | None = None
    tapes: str | None = None
    """Where each delegation's tape is kept, shared by the queue's workers: attempt 2
    of a child resumes from attempt 1's tape (:mod:`._tape`)."""
    record: str | None = None
    """Record the children into one tape there (``Context.open(record=...)``)."""
    prune_after: float = 7 * 24 * 3600.0
    """Bodies older than this are removed from a directory result store at start."""

    def resolved_identity(self) -> str:
        """The identity in force."""
        return self.identity or f"dsh-worker@{socket.gethostname()}:{os.getpid()}"


async def run_worker(
    options: WorkerOptions,
    *,
    stop: asyncio.Event | None = None,
    hurry: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> WorkerStats:
    """Run a worker until ``stop`` is set, then drain (see the module docstring);
    ``hurry`` set cuts the drain short. ``on_ready(line)`` is called once polling has
    started. Returns what the worker did."""
    from temporalio.worker import PollerBehaviorSimpleMaximum, Worker

    stop = stop or asyncio.Event()
    identity = options.resolved_identity()
    store = open_store(options.result_store)
    capacity = options.max_concurrent or host_capacity()
    stats = WorkerStats()
    async with Context.open(
        options.preset, cwd=options.cwd, sessions_dir=options.sessions_dir, record=options.record
    ) as ctx:
        await asyncio.to_thread(_start_watchdog)
        if isinstance(store, DirectoryResultStore):
            await asyncio.to_thread(store.prune, options.prune_after)
        client = await connect(options.address, options.namespace, identity=identity)
        activity = DelegationActivity(
            ctx,
            identity=identity,
            store=store,
            heartbeat_every=options.heartbeat_every,
            stats=stats,
            stopping=hurry,
            tapes=options.tapes,
        )
        worker = Worker(
            client,
            task_queue=options.task_queue,
            workflows=[DelegationsWorkflow],
            activities=[activity.run],
            identity=identity,
            max_concurrent_activities=capacity,
            graceful_shutdown_timeout=timedelta(seconds=options.grace),
            max_heartbeat_throttle_interval=timedelta(seconds=options.heartbeat_every),
            default_heartbeat_throttle_interval=timedelta(seconds=options.heartbeat_every),
            # a batch puts hundreds of activities on the queue at once: enough pollers to
            # fill the free slots quickly (a poll holds a slot; more than the slots is waste)
            activity_task_poller_behavior=PollerBehaviorSimpleMaximum(
                max(2, min(capacity, _MAX_POLLERS))
            ),
            workflow_task_poller_behavior=PollerBehaviorSimpleMaximum(_MAX_POLLERS),
            nonsticky_to_sticky_poll_ratio=0.5,
        )
        running = asyncio.get_running_loop().create_task(worker.run(), name="temporal worker")
        providers = ", ".join(SubagentRuntime.of(ctx).list()) or "none"
        target = describe_target(connect_kwargs(options.address, options.namespace))
        if on_ready is not None:
            on_ready(
                f"polling task queue {options.task_queue} on {target} as {identity};"
                f" up to {capacity} children at once; providers: {providers}"
            )
        waiting = asyncio.get_running_loop().create_task(stop.wait())
        try:
            await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            if not running.done():
                await worker.shutdown()
            with contextlib.suppress(asyncio.CancelledError):
                await running  # raises what made the worker fail, if it did
    return stats


def _start_watchdog() -> None:
    """Start this process's dsh watchdog now: it sweeps the trees a crashed worker on
    this host left behind, and kills this worker's trees if it dies."""
    try:
        from dsh.subprocess import watchdog

        watchdog().ensure_started()
    except Exception:  # a safety net, never a reason not to run
        _log.warning("could not start the dsh process watchdog", exc_info=True)


def serve(options: WorkerOptions) -> int:
    """Run a worker in this process until SIGTERM / SIGINT / SIGHUP (drain) and return
    the exit status: 0 after a drain, whichever signal asked for it; 1 if the worker
    failed."""

    def say(line: str) -> None:
        print(f"dsh worker: {line}", file=sys.stderr, flush=True)

    async def main() -> WorkerStats:
        stop = asyncio.Event()
        hurry = asyncio.Event()
        signals = 0

        def on_signal(number: int) -> None:
            nonlocal signals
            signals += 1
            if signals == 1:
                say(
                    f"{signal.Signals(number).name}: draining (running children get"
                    f" {options.grace:g} s; signal again to stop them now)"
                )
                stop.set()
            else:
                say("stopping the running children now")
                hurry.set()

        with on_stop_signals(on_signal):
            return await run_worker(options, stop=stop, hurry=hurry, on_ready=say)

    try:
        stats = asyncio.run(main())
    except Exception as exc:
        say(f"failed: {type(exc).__name__}: {exc}")
        return 1
    say(f"stopped; {stats.summary()}")
    return 0
