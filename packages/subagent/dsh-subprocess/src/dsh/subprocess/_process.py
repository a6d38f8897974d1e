"""Child processes that never outlive their run, started without freezing the loop.

:meth:`ChildProcess.start` forks and execs in a worker thread (``vfork`` under
``subprocess.Popen``; no ``preexec_fn``, which would force a full fork of this
process and is unsafe with threads), in a session (process group) of its own,
with exactly the environment it is given plus its run tag. stdin/stdout become
asyncio streams; stderr goes into a bounded tail. The exit is watched through a
pidfd where the kernel has one (else a waiter thread), never through the pipes,
so a process another one left holding our pipes cannot make us wait.

:meth:`ChildProcess.terminate` closes stdin, waits a grace period, sends SIGTERM
to the whole group, waits again, sends SIGKILL, reaps, kills what is left of the
group, sweeps the run tag (off the loop) and closes our ends of the pipes; every
step is bounded in time. :meth:`ChildProcess.kill_tree` is the synchronous last
resort. Each group is also registered with this process's watchdog, which kills
it if this process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Literal

import anyio

from dsh.subprocess._errors import ProcessStartError
from dsh.subprocess._sandbox import Sandbox, check_command
from dsh.subprocess._scan import TAG_VARIABLE, proc_available
from dsh.subprocess._spawn import Spawn, kill_popen, spawn_limiter, start_error
from dsh.subprocess._supervisor import RunTag, sweep_off_loop, watchdog
from dsh.subprocess._tail import StderrTail

__all__ = ["ChildProcess", "Ending"]

_log = logging.getLogger("dsh.subprocess")

Ending = Literal["exited", "terminated", "killed"]
"""How :meth:`ChildProcess.terminate` got the child to stop: on stdin EOF, on
SIGTERM, or only on SIGKILL."""

_REAP_BOUND = 5.0
"""Seconds to wait for the kernel to reap a SIGKILLed leader before giving up."""
_GROUP_KILL_BOUND = 1.0
"""Seconds to wait for the SIGKILLed members left in a group to go."""
_STDERR_DRAIN = 0.2
"""Seconds stderr gets to reach EOF after the tree is gone (the child's last words),
before our end is closed anyway (an escaped process may hold it open forever)."""


class ChildProcess:
    """A child in its own process group, torn down by :meth:`terminate`."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        argv: Sequence[str],
        tag: RunTag | None,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        tail: StderrTail,
    ) -> None:
        self.popen = popen
        self.argv = list(argv)
        self.tag = tag
        """Marks the child's whole tree (None: the process group is the tree)."""
        self.stdin = stdin
        """The child's stdin."""
        self.stdout = stdout
        """The child's stdout."""
        self.stderr_tail = tail
        self.pgid = popen.pid  # leader of its own session/group
        self._exited = asyncio.get_running_loop().create_future()
        self._pump: asyncio.Task[None] | None = None
        self._ending: Ending | None = None
        self._killed = False
        self._terminating: asyncio.Task[Ending] | None = None
        self._stderr_transport: asyncio.BaseTransport | None = None
        self._stdout_transport: asyncio.BaseTransport | None = None

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        what: str = "child",
        tag: RunTag | None = None,
        stream_limit: int = 64 * 1024 * 1024,
        stderr_tail_bytes: int = 16384,
        sandbox: Sandbox | None = None,
    ) -> ChildProcess:
        """Start ``argv`` (in a worker thread); a missing or non-executable command
        raises :class:`~dsh.subprocess.ProcessStartError`.

        With ``tag``, its chain is put into ``env`` and teardown also kills every
        process carrying it. Without one, the child still carries the chain this
        process inherited (if it runs inside a tagged tree), so the runs above it
        reach it too. Cancelling the caller while the process starts (however it is
        cancelled) still ends with nothing running.

        With ``sandbox`` (and a mode other than ``off``), ``argv`` runs inside bubblewrap
        (see :class:`~dsh.subprocess.Sandbox`); a sandbox that cannot start raises
        :class:`~dsh.subprocess.SandboxUnavailableError`.
        """
        if not argv:
            raise ProcessStartError(f"{what}: empty command")
        full_env = dict(env)
        if sandbox is not None and sandbox.enabled:
            check_command(what, argv[0], full_env, cwd)
            full_env.update(sandbox.env(cwd))
        else:
            sandbox = None
        if tag is not None:
            full_env.update(tag.env)
        elif TAG_VARIABLE not in full_env and os.environ.get(TAG_VARIABLE):
            full_env[TAG_VARIABLE] = os.environ[TAG_VARIABLE]
        spawn = Spawn(list(argv), full_env, cwd, tag, sandbox)
        try:
            popen = await anyio.to_thread.run_sync(spawn.run, limiter=spawn_limiter())
        except (OSError, ValueError) as exc:
            raise ProcessStartError(start_error(what, argv[0], cwd, exc)) from exc
        except BaseException:
            spawn.abandon()  # cancelled: the thread may have started the process anyway
            raise
        try:
            return await cls._attach(popen, argv, tag, stream_limit, stderr_tail_bytes)
        except BaseException:
            kill_popen(popen, tag)
            raise

    @classmethod
    async def _attach(
        cls,
        popen: subprocess.Popen[bytes],
        argv: Sequence[str],
        tag: RunTag | None,
        stream_limit: int,
        stderr_tail_bytes: int,
    ) -> ChildProcess:
        loop = asyncio.get_running_loop()
        assert popen.stdin is not None
        assert popen.stdout is not None
        assert popen.stderr is not None
        transports: list[asyncio.BaseTransport] = []
        try:
            reader = asyncio.StreamReader(limit=stream_limit)
            stdout_transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), popen.stdout
            )
            transports.append(stdout_transport)
            stdin_transport, stdin_protocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, popen.stdin
            )
            transports.append(stdin_transport)
            writer = asyncio.StreamWriter(stdin_transport, stdin_protocol, None, loop)
            stderr_reader = asyncio.StreamReader()
            stderr_transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(stderr_reader), popen.stderr
            )
            transports.append(stderr_transport)
        except BaseException:
            for transport in transports:  # no reader left registered on a closed pipe
                transport.close()
            raise
        tail = StderrTail(stderr_tail_bytes)
        child = cls(popen, argv, tag, writer, reader, tail)
        child._stdout_transport = stdout_transport
        child._stderr_transport = stderr_transport
        child._pump = loop.create_task(tail.pump(stderr_reader))
        child._watch_exit(loop)
        return child

    # -- state ------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The child's pid (also its process group id)."""
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """Exit status once reaped (negative: killed by that signal)."""
        return self.popen.returncode

    @property
    def ending(self) -> Ending | None:
        """How :meth:`terminate` stopped the child, once it has."""
        return self._ending

    def exit_description(self) -> str:
        """``exit status N`` / ``killed by SIGX`` / ``still running``."""
        code = self.popen.returncode
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"

    async def wait(self) -> int:
        """Wait until the child has exited and been reaped (not for its pipes)."""
        return await asyncio.shield(self._exited)

    async def drain_stderr(self, timeout: float = 0.5) -> None:
        """Wait (at most ``timeout`` s) for stderr to reach EOF, so that after the
        child died :attr:`stderr_tail` holds its last words."""
        pump = self._pump
        if pump is not None and not pump.done():
            await asyncio.wait({pump}, timeout=timeout)

    # -- exit watching ---------------------------------------------------------------

    def _watch_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            try:
                fd = pidfd_open(self.popen.pid)
            except OSError:
                fd = -1
            if fd >= 0:
                loop.add_reader(fd, self._on_pidfd, loop, fd)
                return
        threading.Thread(
            target=self._wait_in_thread, args=(loop,), name="dsh-child-wait", daemon=True
        ).start()

    def _on_pidfd(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        if self.popen.poll() is None:
            return  # spurious wake-up
        loop.remove_reader(fd)
        os.close(fd)
        self._set_exited()

    def _wait_in_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        self.popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(self._set_exited)

    def _set_exited(self) -> None:
        if not self._exited.done():
            code = self.popen.returncode
            self._exited.set_result(code if code is not None else 0)

    # -- signals ----------------------------------------------------------------------

    def live_group_members(self) -> list[int]:
        """Pids in the child's process group that are alive (zombies excluded)."""
        return _live_members(self.pgid)

    def kill_group(self, sig: int = signal.SIGKILL) -> bool:
        """Send ``sig`` to the child's whole process group; False if it is gone."""
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def kill_tree(self) -> None:
        """SIGKILL the group now and have the watchdog sweep the tag (no await, no
        scan on this thread): for paths where awaiting is no longer possible. A
        teardown under way goes on (and reports ``killed``)."""
        if self.popen.returncode is None and not self._exited.done():
            self._killed = True
        self.kill_group(signal.SIGKILL)
        if self.tag is not None:
            self.tag.sweep_later()
        self._close_pipes()

    # -- teardown ---------------------------------------------------------------------

    async def terminate(self, *, eof_grace: float = 2.0, term_grace: float = 2.0) -> Ending:
        """Stop the child and reap it: stdin EOF, grace, SIGTERM, grace, SIGKILL.

        The whole process group is signalled, anything left of it after the leader
        exits is killed, and the tag is swept. Idempotent; concurrent callers share
        one teardown, which runs in a task of its own: a cancelled caller SIGKILLs
        the tree at once (:meth:`kill_tree`) and gets its cancellation; the teardown
        finishes anyway, and a later call returns its ending. Bounded: about
        ``eof_grace + term_grace`` plus a few seconds at worst, whatever holds the
        child's pipes.
        """
        if self._ending is not None:
            return self._ending
        task = self._terminating
        if task is None:
            task = self._terminating = asyncio.get_running_loop().create_task(
                self._terminate(eof_grace, term_grace)
            )
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                self.kill_tree()
            raise

    async def _terminate(self, eof_grace: float, term_grace: float) -> Ending:
        try:
            ending = await self._stop_leader(eof_grace, term_grace)
            await self._stop_group(term_grace)
            if self.tag is not None and proc_available():
                # descendants that left the group (own sessions, orphans): off the loop
                await sweep_off_loop(self.tag.element)
            await self.drain_stderr(_STDERR_DRAIN)
        except BaseException:
            self.kill_tree()
            raise
        finally:
            self._close_pipes()
            await self._stop_pump()
        watchdog().remove_group(self.pgid)
        if self._killed and self.popen.returncode == -signal.SIGKILL:
            ending = "killed"  # kill_tree() cut the graces short
        self._ending = ending
        return ending

    async def _stop_leader(self, eof_grace: float, term_grace: float) -> Ending:
        self._close_stdin()
        if self.popen.returncode is not None or self._exited.done():
            return "exited"
        if await self._wait(eof_grace):
            return "exited"
        self.kill_group(signal.SIGTERM)
        if await self._wait(term_grace):
            return "terminated"
        self.kill_group(signal.SIGKILL)
        if not await self._wait(_REAP_BOUND):
            _log.warning(
                "%s (pid %d) did not go away %g s after SIGKILL",
                self.argv[0],
                self.pid,
                _REAP_BOUND,
            )
        return "killed"

    async def _stop_group(self, term_grace: float) -> None:
        """The leader is gone; members it left in its group go too (scans off the loop)."""
        if not self.kill_group(0):
            return  # the group is empty
        if not await self._group_alive():
            return
        self.kill_group(signal.SIGTERM)
        deadline = time.monotonic() + min(term_grace, 0.5)
        while time.monotonic() < deadline and await self._group_alive():
            await asyncio.sleep(0.02)
        if not self.kill_group(signal.SIGKILL):
            return
        deadline = time.monotonic() + _GROUP_KILL_BOUND  # return once they are gone
        while time.monotonic() < deadline and await self._group_alive():
            await asyncio.sleep(0.01)

    async def _group_alive(self) -> bool:
        members: list[int] = await anyio.to_thread.run_sync(self.live_group_members)
        return bool(members)

    async def _wait(self, timeout: float) -> bool:
        if self._exited.done():
            return True
        if timeout <= 0:
            return False
        with anyio.move_on_after(timeout):
            await asyncio.shield(self._exited)
        return self._exited.done()

    def _close_stdin(self) -> None:
        if not self.stdin.is_closing():
            with contextlib.suppress(OSError, RuntimeError):
                self.stdin.close()

    def _close_pipes(self) -> None:
        """Close our ends of the pipes: a process that escaped with copies of the
        child's stdout/stderr cannot keep us waiting for EOF."""
        self._close_stdin()
        for transport in (self._stdout_transport, self._stderr_transport):
            if transport is not None and not transport.is_closing():
                transport.close()

    async def _stop_pump(self) -> None:
        pump = self._pump
        if pump is None:
            return
        self._pump = None
        if not pump.done():
            with anyio.move_on_after(0.2):
                await asyncio.wait({pump})
        if not pump.done():
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump


def _live_members(pgid: int) -> list[int]:
    """Non-zombie processes whose process group is ``pgid`` (Linux /proc; else killpg)."""
    try:
        os.killpg(pgid, 0)  # fast path: an empty group needs no /proc scan
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    if not proc_available():
        return [pgid]
    members: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[-1].split()
        except OSError:
            continue
        # after the command name: state, ppid, pgrp, ...
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members
