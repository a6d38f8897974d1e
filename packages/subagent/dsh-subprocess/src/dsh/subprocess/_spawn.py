"""Starting a child process in a worker thread, and killing it if nobody waits for it.

:class:`Spawn` is one start: ``subprocess.Popen`` (``vfork``, no ``preexec_fn``) in a
session of its own, registered with the watchdog, run in a worker thread so the event
loop does not freeze; a caller cancelled while the thread runs still ends with nothing
running (:meth:`Spawn.abandon`). A sandboxed process is started from a thread that lives
as long as this process (bubblewrap's ``--die-with-parent`` follows the thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import subprocess
import threading
import weakref

import anyio

from dsh.subprocess._sandbox import Sandbox
from dsh.subprocess._supervisor import RunTag, watchdog

__all__ = ["Spawn", "kill_popen", "popen_child", "spawn_limiter", "start_error"]

_log = logging.getLogger("dsh.subprocess")


class Spawn:
    """One start in a worker thread, and who kills its process if the caller that
    waits for the thread is cancelled (before or after the process exists)."""

    __slots__ = ("abandoned", "argv", "cwd", "env", "lock", "popen", "sandbox", "tag")

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        tag: RunTag | None,
        sandbox: Sandbox | None = None,
    ):
        self.argv, self.env, self.cwd, self.tag = argv, env, cwd, tag
        self.sandbox = sandbox
        self.lock = threading.Lock()
        self.popen: subprocess.Popen[bytes] | None = None
        self.abandoned = False

    def run(self) -> subprocess.Popen[bytes]:
        """Start the process (in the calling worker thread); killed at once if abandoned."""
        if self.sandbox:
            # bwrap --die-with-parent dies with the *thread* that started it: never an
            # anyio worker (they exit when idle), one of the spawner's, which live on
            argv = self.sandbox.wrap(self.argv, self.cwd)
            popen = _sandbox_spawner().submit(popen_child, argv, self.env, self.cwd).result()
        else:
            popen = popen_child(self.argv, self.env, self.cwd)
        with self.lock:
            self.popen = popen
            abandoned = self.abandoned
        if abandoned:
            kill_popen(popen, self.tag)
        return popen

    def abandon(self) -> None:
        """The caller gave up: kill the process now, or as soon as it exists."""
        with self.lock:
            self.abandoned = True
            popen = self.popen
        if popen is not None:
            kill_popen(popen, self.tag)


_SPAWN_THREADS = 8
"""Worker threads that spawn at once (per event loop), apart from anyio's default pool:
a fan-out does not take every token other blocking work needs, and more threads do
not start processes faster (200 starts: the same wall time with 8 as with 40)."""
_spawn_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


_spawner: concurrent.futures.ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _sandbox_spawner() -> concurrent.futures.ThreadPoolExecutor:
    """Threads that start sandboxed processes and live as long as this process."""
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = concurrent.futures.ThreadPoolExecutor(
                _SPAWN_THREADS, thread_name_prefix="dsh-sandbox-spawn"
            )
        return _spawner


def _forget_spawner() -> None:
    global _spawner
    _spawner = None  # a forked child has none of its parent's threads


os.register_at_fork(after_in_child=_forget_spawner)


def spawn_limiter() -> anyio.CapacityLimiter:
    """The worker-thread limiter that starts take on this event loop."""
    loop = asyncio.get_running_loop()
    limiter = _spawn_limiters.get(loop)
    if limiter is None:
        limiter = _spawn_limiters[loop] = anyio.CapacityLimiter(_SPAWN_THREADS)
    return limiter


def start_error(what: str, command: str, cwd: str, exc: OSError | ValueError) -> str:
    """The message of a start that failed: the command, and the cwd when it was the cause."""
    reason = getattr(exc, "strerror", None) or str(exc)
    if getattr(exc, "filename", None) == cwd and cwd != command:
        return f"could not start {what} {command!r} in {cwd!r}: {reason}"
    return f"could not start {what} {command!r}: {reason}"


def popen_child(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.Popen[bytes]:
    """``Popen`` in a session of its own, piped, registered with the watchdog (blocking)."""
    try:
        # before the child exists: a parent killed between the two would orphan it
        watchdog().ensure_started()
    except Exception:
        _log.debug("could not start the watchdog", exc_info=True)
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
    )
    try:
        watchdog().add_group(popen.pid)
    except Exception:  # the watchdog is a second line of defence, never a reason to fail
        _log.debug("could not register group %d with the watchdog", popen.pid, exc_info=True)
    return popen


def kill_popen(popen: subprocess.Popen[bytes], tag: RunTag | None) -> None:
    """SIGKILL the group, sweep the tag later, close the pipes, reap in a thread."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    if tag is not None:
        tag.sweep_later()
    for stream in (popen.stdin, popen.stdout, popen.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    threading.Thread(target=popen.wait, name="dsh-child-reap", daemon=True).start()
