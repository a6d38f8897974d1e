"""Child processes that never outlive their run.

:class:`ChildProcess` starts a command in its own process group (new session),
with a credential-scrubbed environment the caller passes, stdin/stdout pipes and
stderr captured into a bounded tail. :meth:`ChildProcess.terminate` closes stdin,
waits a grace period, sends SIGTERM to the whole group, waits again, sends
SIGKILL, and reaps. On Linux the child also gets ``PR_SET_PDEATHSIG`` so it dies
if the parent process is killed outright. With a
:class:`~dsh.subagent.out_of_process.tags.ProcessTag` the teardown also reaches
descendants that left the group (own sessions, re-parented).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import anyio

from dsh.subagent.diagnostics import redact_secrets
from dsh.subagent.errors import SubagentError
from dsh.subagent.out_of_process.tags import ProcessTag

__all__ = ["ChildProcess", "Ending", "StderrTail"]

Ending = Literal["exited", "terminated", "killed"]
"""How :meth:`ChildProcess.terminate` got the child to stop: on stdin EOF, on
SIGTERM, or only on SIGKILL."""

_PR_SET_PDEATHSIG = 1


def _die_with_parent_hook() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:  # runs in the child between fork and exec: keep it minimal
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return hook


_PDEATHSIG = _die_with_parent_hook()


class StderrTail:
    """Keeps the last ``limit`` bytes written to a stream (bounded memory)."""

    __slots__ = ("_buffer", "_dropped", "limit")

    def __init__(self, limit: int = 16384) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._dropped = 0

    def feed(self, data: bytes) -> None:
        """Append ``data``, dropping the oldest bytes beyond the limit."""
        self._buffer += data
        excess = len(self._buffer) - self.limit
        if excess > 0:
            del self._buffer[:excess]
            self._dropped += excess

    async def pump(self, stream: asyncio.StreamReader) -> None:
        """Read ``stream`` until EOF."""
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                return
            self.feed(chunk)

    def text(self, max_chars: int = 2000) -> str:
        """The tail as text: secrets redacted, at most ``max_chars`` characters."""
        text = self._buffer.decode("utf-8", errors="replace").strip()
        if len(text) > max_chars:
            text = "…" + text[-max_chars:]
        elif self._dropped:
            text = "…" + text
        return redact_secrets(text)


class ChildProcess:
    """A child in its own process group, torn down by :meth:`terminate`."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        argv: Sequence[str],
        tail: StderrTail,
        tag: ProcessTag | None = None,
    ) -> None:
        self.process = process
        self.argv = list(argv)
        self.stderr_tail = tail
        self.tag = tag
        """Marks the child's whole tree (None: the process group is the tree)."""
        self.pgid = process.pid  # leader of its own session/group
        self._pump: asyncio.Task[None] | None = None
        self._ending: Ending | None = None
        self._terminating: asyncio.Future[Ending] | None = None

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        what: str = "child",
        stream_limit: int = 64 * 1024 * 1024,
        stderr_tail_bytes: int = 16384,
        die_with_parent: bool = True,
        tag: ProcessTag | None = None,
    ) -> ChildProcess:
        """Start ``argv``; a missing or non-executable command raises ``START_FAILED``.

        With ``tag``, its entry is added to ``env`` and :meth:`terminate` (and
        :meth:`kill_tree`) also kill every process carrying it.
        """
        if not argv:
            raise SubagentError(f"{what}: empty command", "START_FAILED")
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**env, **tag.env} if tag is not None else dict(env),
                cwd=cwd,
                start_new_session=True,
                limit=stream_limit,
                preexec_fn=_PDEATHSIG if die_with_parent else None,
            )
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise SubagentError(
                f"could not start {what} {argv[0]!r}: {reason}", "START_FAILED"
            ) from exc
        child = cls(process, argv, StderrTail(stderr_tail_bytes), tag)
        assert process.stderr is not None
        child._pump = asyncio.get_running_loop().create_task(child.stderr_tail.pump(process.stderr))
        return child

    @property
    def pid(self) -> int:
        """The child's pid (also its process group id)."""
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """Exit status once reaped (negative: killed by that signal)."""
        return self.process.returncode

    @property
    def stdin(self) -> asyncio.StreamWriter:
        """The child's stdin."""
        assert self.process.stdin is not None
        return self.process.stdin

    @property
    def stdout(self) -> asyncio.StreamReader:
        """The child's stdout."""
        assert self.process.stdout is not None
        return self.process.stdout

    @property
    def ending(self) -> Ending | None:
        """How :meth:`terminate` stopped the child, once it has."""
        return self._ending

    def exit_description(self) -> str:
        """``exit status N`` / ``killed by SIGX`` / ``still running``."""
        code = self.process.returncode
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"

    async def drain_stderr(self, timeout: float = 0.5) -> None:
        """Wait (at most ``timeout`` s) for stderr to reach EOF, so that after the
        child died :attr:`stderr_tail` holds its last words."""
        pump = self._pump
        if pump is not None and not pump.done():
            await asyncio.wait({pump}, timeout=timeout)

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
        """SIGKILL the group and every tagged process, synchronously (no await).

        For paths where awaiting is no longer possible (a ``finally`` reached by a
        second cancellation); the leader is reaped by the event loop's child watcher.
        """
        self.kill_group(signal.SIGKILL)
        if self.tag is not None:
            self.tag.sweep()

    async def terminate(self, *, eof_grace: float = 2.0, term_grace: float = 2.0) -> Ending:
        """Stop the child and reap it: stdin EOF, grace, SIGTERM, grace, SIGKILL.

        The whole process group is signalled, and any member left after the leader
        exits is killed too. Idempotent; concurrent callers share one teardown.
        Runs shielded from cancellation so a cancelled caller leaves nothing behind.
        """
        if self._ending is not None:
            return self._ending
        if self._terminating is not None:
            with anyio.CancelScope(shield=True):
                return await asyncio.shield(self._terminating)
        self._terminating = asyncio.get_running_loop().create_future()
        try:
            with anyio.CancelScope(shield=True):
                ending = await self._terminate(eof_grace, term_grace)
        except BaseException as exc:
            # Interrupted (e.g. a raw asyncio cancel, which a shield does not stop):
            # waiters get the error, and a later call starts the teardown afresh.
            terminating, self._terminating = self._terminating, None
            terminating.set_exception(exc)
            terminating.exception()  # mark retrieved
            raise
        self._ending = ending
        self._terminating.set_result(ending)
        return ending

    async def _terminate(self, eof_grace: float, term_grace: float) -> Ending:
        process = self.process
        ending: Ending = "exited"
        if process.returncode is None:
            self._close_stdin()
            if not await self._wait(eof_grace):
                ending = "terminated"
                self.kill_group(signal.SIGTERM)
                if not await self._wait(term_grace):
                    ending = "killed"
                    self.kill_group(signal.SIGKILL)
                    await process.wait()
        else:
            self._close_stdin()
        # The leader is gone; members it left in its group go too.
        if self.live_group_members():
            self.kill_group(signal.SIGTERM)
            deadline = time.monotonic() + min(term_grace, 0.5)
            while self.live_group_members() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            self.kill_group(signal.SIGKILL)
        if self.tag is not None:
            self.tag.sweep()  # descendants that left the group (own sessions, orphans)
        await self._stop_pump()
        return ending

    def _close_stdin(self) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            with contextlib.suppress(OSError, RuntimeError):
                stdin.close()

    async def _wait(self, timeout: float) -> bool:
        if timeout <= 0:
            return self.process.returncode is not None
        with anyio.move_on_after(timeout):
            await self.process.wait()
        return self.process.returncode is not None

    async def _stop_pump(self) -> None:
        pump = self._pump
        if pump is None:
            return
        self._pump = None
        with anyio.move_on_after(0.5):
            with contextlib.suppress(Exception):
                await asyncio.shield(pump)
        if not pump.done():
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump


def _live_members(pgid: int) -> list[int]:
    """Non-zombie processes whose process group is ``pgid`` (Linux /proc; else killpg)."""
    try:
        os.killpg(pgid, 0)  # fast path: an empty group needs no /proc scan (~2 ms)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    try:
        entries = os.listdir("/proc")
    except OSError:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members: list[int] = []
    for entry in entries:
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
