"""Terminals: a command running in the background, its output kept up to a byte limit.

What an ACP client offers an agent as ``terminal/*`` (create, output, wait for exit,
kill, release): a :class:`ChildProcess` in a process group of its own with a fresh
:class:`RunTag` (so teardown, and the watchdog if dsh dies, reach every process it
starts), stdin closed, its output read as it comes and only the last
``output_byte_limit`` bytes kept (cut on a character boundary when read).

A tool that can run commands (the shell tool) offers a :class:`TerminalOpener` in its
:attr:`~dsh.core.Tool.extensions` under :data:`TERMINAL_EXTENSION`: the opener binds
the tool's own shell, environment, working directory and sandbox, so whoever finds
the tool through the registry (the ``acp`` provider serving a child agent) starts
terminals under the same rules as the tool's calls, without importing the tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from dsh.subprocess._process import ChildProcess
from dsh.subprocess._sandbox import Sandbox
from dsh.subprocess._supervisor import RunTag

__all__ = ["TERMINAL_EXTENSION", "Terminal", "TerminalOpener"]

TERMINAL_EXTENSION = "terminal"
"""The key of a :class:`TerminalOpener` in a tool's ``extensions``."""

_CHUNK = 65536
_DRAIN = 0.5
"""Seconds the output pipe gets to reach end-of-file once the command exited."""


class TerminalOpener(Protocol):
    """Starts a terminal the way a tool runs its commands (see the module docstring).

    ``arguments`` are the tool's parsed arguments (the shell tool's: ``command``),
    ``tctx`` the :class:`~dsh.core.ToolContext` of the call (whose agent's cwd and
    sandbox apply); ``cwd`` (absolute) replaces the tool's working directory, ``env``
    adds variables. The caller checks the tool's permission first, as
    :meth:`~dsh.core.Tool.invoke` does. A command that cannot start raises
    :class:`~dsh.subprocess.ProcessStartError`."""

    async def __call__(
        self,
        arguments: Any,
        tctx: Any,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        output_byte_limit: int | None = None,
    ) -> Terminal:
        """Start the command; see the class docstring."""


class Terminal:
    """One background command and the tail of its output (see the module docstring).

    Every way it ends goes through the process group: :meth:`kill` stops the tree
    (SIGTERM, ``term_grace``, SIGKILL, the tag swept) and keeps the output;
    :meth:`release` does that and stops reading; :meth:`kill_now` SIGKILLs at once
    (for a parent that can no longer await)."""

    def __init__(self, child: ChildProcess, output_byte_limit: int, term_grace: float) -> None:
        self.child = child
        self.limit = max(0, output_byte_limit)
        self.term_grace = term_grace
        self._buffer = bytearray()
        self._dropped = 0
        self.total = 0
        """Bytes of output received."""
        self._drained = asyncio.Event()
        self._pump = asyncio.get_running_loop().create_task(self._read())
        self.released = False

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        output_byte_limit: int,
        term_grace: float = 1.0,
        sandbox: Sandbox | None = None,
        what: str = "terminal",
    ) -> Terminal:
        """Start ``argv`` in ``cwd`` (in ``sandbox``), stdin closed; raises
        :class:`~dsh.subprocess.ProcessStartError` when it cannot start."""
        child = await ChildProcess.start(
            argv, env=env, cwd=cwd, what=what, tag=RunTag(), stderr_tail_bytes=4096, sandbox=sandbox
        )
        with contextlib.suppress(OSError, RuntimeError):
            child.stdin.close()
        return cls(child, output_byte_limit, term_grace)

    async def _read(self) -> None:
        try:
            while True:
                try:
                    chunk = await self.child.stdout.read(_CHUNK)
                except (ConnectionError, OSError, ValueError):
                    return
                if not chunk:
                    return
                self.total += len(chunk)
                self._buffer += chunk
                excess = len(self._buffer) - self.limit
                if excess > 0:
                    del self._buffer[:excess]
                    self._dropped += excess
        finally:
            self._drained.set()

    # -- state ------------------------------------------------------------------------

    @property
    def exit_code(self) -> int | None:
        """The exit code once the command exited normally (None: running, or killed)."""
        code = self.child.returncode
        return code if code is not None and code >= 0 else None

    @property
    def signal(self) -> str | None:
        """The name of the signal that ended the command (None: running, or exited)."""
        code = self.child.returncode
        if code is None or code >= 0:
            return None
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"

    @property
    def exited(self) -> bool:
        """True once the command (the group's leader) has exited and been reaped."""
        return self.child.returncode is not None

    def output(self) -> tuple[str, bool]:
        """The output kept so far and whether some was left out (at the beginning);
        the text starts on a character boundary."""
        data = bytes(self._buffer)
        skip = 0
        if self._dropped:
            while skip < min(3, len(data)) and 0x80 <= data[skip] <= 0xBF:
                skip += 1  # continuation bytes of a character cut in two
        return data[skip:].decode("utf-8", "replace"), self._dropped + skip > 0

    # -- ending -----------------------------------------------------------------------

    async def wait(self) -> int:
        """Wait until the command exits; then give its output a moment to arrive."""
        code = await self.child.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), _DRAIN)
        return code

    async def kill(self) -> None:
        """Stop the command and every process it started; the output stays readable."""
        await self.child.terminate(eof_grace=0, term_grace=self.term_grace)

    async def release(self) -> None:
        """:meth:`kill`, then stop reading: nothing of it is left."""
        self.released = True
        try:
            await self.kill()
        finally:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pump

    def kill_now(self) -> None:
        """SIGKILL the tree now and have the watchdog sweep its tag (synchronous)."""
        self.released = True
        self.child.kill_tree()
        self._pump.cancel()
