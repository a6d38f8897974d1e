"""Running one command: a process tree that never outlives its tool call.

The command runs as ``<shell> -c <command>`` in a :class:`~dsh.subprocess.ChildProcess`:
spawned off the event loop in a process group (session) of its own, carrying a fresh
:class:`~dsh.subprocess.RunTag` that every descendant inherits, registered with the
watchdog that kills it if dsh dies. stderr is folded into stdout (the shell starts
with ``exec 2>&1``) so the model sees both in the order they were written; stdin is
closed at once (a command that reads it gets end-of-file, never a hang).

The call ends in one of three ways, and on every one the tree is torn down
(SIGTERM to the group, ``term_grace``, SIGKILL, then every process carrying the tag
is killed, including ones that left the group with ``setsid``) before it returns:

* the shell exits — its exit status is the result (processes it left running in the
  background are killed too: nothing outlives the call);
* the timeout passes;
* the call's signal fires, or the task running it is cancelled.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import anyio

from dsh.core import AbortSignal
from dsh.subprocess import ChildProcess, ProcessStartError, RunTag, Sandbox

__all__ = ["CommandResult", "OutputCapture", "run_command"]

Outcome = Literal["exited", "timeout", "cancelled", "not-started"]

_DRAIN = 0.5
"""Seconds the output pipe gets to reach end-of-file after the shell exited (a
background process may hold it open) before the tree is torn down."""
_CHUNK = 65536


class OutputCapture:
    """Keeps the beginning and the end of a stream, at most ``limit`` bytes in all."""

    __slots__ = ("_head", "_head_limit", "_tail", "_tail_limit", "total")

    def __init__(self, limit: int) -> None:
        self._tail_limit = limit // 4
        self._head_limit = limit - self._tail_limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0
        """Bytes received."""

    @property
    def truncated(self) -> bool:
        """True when bytes were left out."""
        return self.total > len(self._head) + len(self._tail)

    def feed(self, chunk: bytes) -> None:
        """Take the next ``chunk`` of the stream."""
        self.total += len(chunk)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            excess = len(self._tail) - self._tail_limit
            if excess > 0:
                del self._tail[:excess]

    def text(self) -> str:
        """The kept output as text, with a ``[truncated: ...]`` marker where bytes were
        left out (cut on character boundaries)."""
        if not self.truncated:
            return bytes(self._head + self._tail).decode("utf-8", "replace")
        head = codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(self._head))
        tail = bytes(self._tail)
        skip = 0
        while skip < min(3, len(tail)) and 0x80 <= tail[skip] <= 0xBF:
            skip += 1  # continuation bytes of a character cut in two
        left_out = self.total - len(self._head) - len(self._tail) + skip
        end = tail[skip:].decode("utf-8", "replace")
        return f"{head}\n[truncated: {left_out} bytes of output left out here]\n{end}"


@dataclass(frozen=True, slots=True)
class CommandResult:
    """How a command ended and what it wrote."""

    outcome: Outcome
    output: str
    exit_status: int | None
    """The shell's exit status (negative: killed by that signal); None if not started."""
    description: str
    """``exit status N``, ``killed by SIGKILL``..."""
    truncated: bool
    reason: str | None = None
    """Why it was cancelled, or why it could not start."""


async def run_command(
    argv: list[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    timeout: float,
    max_output_bytes: int,
    term_grace: float,
    signal: AbortSignal,
    sandbox: Sandbox | None = None,
) -> CommandResult:
    """Run ``argv`` (a shell and its ``-c`` script) until it exits, times out or is
    cancelled; nothing it started is left running when this returns or raises.
    With ``sandbox``, it runs inside bubblewrap (a sandbox that cannot start is a
    ``not-started`` result that says how to fix it)."""
    if signal.aborted:
        return CommandResult("cancelled", "", None, "not started", False, signal.reason)
    try:
        child = await ChildProcess.start(
            argv,
            env=env,
            cwd=cwd,
            what="shell",
            tag=RunTag(),
            stderr_tail_bytes=4096,
            sandbox=sandbox,
        )
    except ProcessStartError as exc:
        return CommandResult("not-started", "", None, "not started", False, str(exc))
    capture = OutputCapture(max_output_bytes)
    outcome: Outcome = "exited"
    try:
        with contextlib.suppress(OSError, RuntimeError):
            child.stdin.close()
        async with anyio.create_task_group() as tasks:
            drained = anyio.Event()
            tasks.start_soon(_pump, child.stdout, capture, drained)
            outcome = await _wait(child, timeout, signal)
            if outcome == "exited":
                with anyio.move_on_after(_DRAIN):
                    await drained.wait()
            await _stop(child, term_grace)  # closes our end of the pipe: the pump ends
            with anyio.move_on_after(_DRAIN):
                await drained.wait()
            tasks.cancel_scope.cancel()  # never wait on a pipe
    finally:
        await _stop(child, term_grace)
    output = capture.text()
    extra = child.stderr_tail.text()  # only what the shell wrote before `exec 2>&1`
    if extra:
        output = f"{output}\n{extra}" if output else extra
    return CommandResult(
        outcome,
        output,
        child.returncode,
        child.exit_description(),
        capture.truncated,
        signal.reason if outcome == "cancelled" else None,
    )


async def _pump(stream: asyncio.StreamReader, capture: OutputCapture, done: anyio.Event) -> None:
    try:
        while True:
            try:
                chunk = await stream.read(_CHUNK)
            except (ConnectionError, OSError):
                return
            if not chunk:
                return
            capture.feed(chunk)
    finally:
        done.set()


async def _wait(child: ChildProcess, timeout: float, signal: AbortSignal) -> Outcome:
    with anyio.CancelScope() as scope:
        unlink = signal.on_abort(lambda _reason: scope.cancel())
        try:
            with anyio.move_on_after(timeout) as timer:
                await child.wait()
        finally:
            unlink()
    if timer.cancelled_caught:
        return "timeout"
    if scope.cancelled_caught:
        return "cancelled"
    return "exited"


async def _stop(child: ChildProcess, term_grace: float) -> None:
    """Tear the tree down (idempotent); not interrupted by a cancellation."""
    with anyio.CancelScope(shield=True):
        await child.terminate(eof_grace=0, term_grace=term_grace)
