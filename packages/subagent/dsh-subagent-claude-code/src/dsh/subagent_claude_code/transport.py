"""A claude-agent-sdk ``Transport`` that owns the CLI process, and tears its tree down fast.

The SDK's own subprocess transport passes the CLI all of this process's
environment, keeps it in the caller's process group, and on close waits 5 s for
it to exit on stdin EOF (which it does not do mid-turn) before SIGTERM; a second
cancellation inside that window leaks the CLI and its tool processes. Its
``close`` is also not safe to run twice at once.

:class:`CLIProcessTransport` implements the SDK's public ``Transport`` interface
on :class:`~dsh.subagent.out_of_process.ChildProcess`: the CLI gets exactly the
environment it is given, its own session (process group) and
``PR_SET_PDEATHSIG``; a :class:`~dsh.subagent.out_of_process.ProcessTag` marks
every process of the run, including the Bash tool's commands, which the CLI
starts in sessions of their own. :meth:`CLIProcessTransport.close` (idempotent,
concurrent callers share one teardown) sends SIGTERM to the group at once (the
CLI then stops its tool processes), SIGKILLs what is left after ``term_grace``,
sweeps the tag, and reaps; if a second cancellation interrupts it, the same kill
happens synchronously. Pass it to ``claude_agent_sdk.query(transport=...)``;
the SDK's Query then runs the control protocol (initialize, permission
callbacks) over it unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from claude_agent_sdk import CLIConnectionError, CLIJSONDecodeError, ProcessError, Transport

from dsh.subagent.out_of_process import ChildProcess, ProcessTag

__all__ = ["CLIProcessTransport"]


class CLIProcessTransport(Transport):
    """The Claude Code CLI as a child process, spoken to in stream-json over stdio."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        tag: ProcessTag | None = None,
        term_grace: float = 0.3,
        stderr_tail_bytes: int = 16384,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd
        self.tag = tag or ProcessTag()
        """Carried by the CLI and everything it starts."""
        self.term_grace = term_grace
        self._stderr_tail_bytes = stderr_tail_bytes
        self._child: ChildProcess | None = None
        self._ready = False
        self._write_lock = asyncio.Lock()

    # -- state ----------------------------------------------------------------------

    @property
    def child(self) -> ChildProcess | None:
        """The CLI process once connected."""
        return self._child

    @property
    def closed(self) -> bool:
        """True once :meth:`close` finished (the whole tree is gone and reaped)."""
        return self._child is not None and self._child.ending is not None

    def stderr_text(self, max_chars: int = 1500) -> str:
        """The end of the CLI's stderr, secrets redacted ('' before it started)."""
        return self._child.stderr_tail.text(max_chars) if self._child is not None else ""

    def exit_description(self) -> str:
        """``exit status N`` / ``killed by SIGX`` / ``still running`` / ``not started``."""
        return self._child.exit_description() if self._child is not None else "not started"

    # -- Transport --------------------------------------------------------------------

    async def connect(self) -> None:
        """Start the CLI (idempotent); a bad executable raises ``SubagentError`` START_FAILED."""
        if self._child is not None:
            return
        self._child = await ChildProcess.start(
            self.argv,
            env=self.env,
            cwd=self.cwd,
            what="Claude Code CLI",
            tag=self.tag,
            stderr_tail_bytes=self._stderr_tail_bytes,
        )
        self._ready = True

    def is_ready(self) -> bool:
        """True between :meth:`connect` and the end of input or :meth:`close`."""
        return self._ready

    async def write(self, data: str) -> None:
        """Write one stream-json line to the CLI's stdin."""
        async with self._write_lock:
            child = self._child
            if not self._ready or child is None or child.stdin.is_closing():
                raise CLIConnectionError("the Claude Code CLI is not ready for writing")
            if child.returncode is not None:
                raise CLIConnectionError(
                    f"cannot write to the Claude Code CLI: it ended ({child.exit_description()})"
                )
            try:
                child.stdin.write(data.encode())
                await child.stdin.drain()
            except (ConnectionError, OSError) as exc:
                self._ready = False
                raise CLIConnectionError(f"writing to the Claude Code CLI failed: {exc}") from exc

    async def end_input(self) -> None:
        """Close the CLI's stdin (it exits once idle)."""
        async with self._write_lock:
            self._ready = False
            child = self._child
            if child is not None and not child.stdin.is_closing():
                with contextlib.suppress(OSError, RuntimeError):
                    child.stdin.close()

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        """The CLI's stdout as JSON objects; a non-zero exit raises ``ProcessError``."""
        return self._read()

    async def _read(self) -> AsyncIterator[dict[str, Any]]:
        child = self._child
        if child is None:
            raise CLIConnectionError("the Claude Code CLI is not started")
        stdout = child.stdout
        while True:
            try:
                line = await stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                line = exc.partial  # EOF, maybe after a last unterminated line
            except asyncio.LimitOverrunError as exc:
                raise CLIConnectionError(
                    f"the Claude Code CLI wrote a line longer than {exc.consumed} bytes"
                ) from exc
            except (ConnectionError, OSError):
                line = b""
            if not line:
                break
            text = line.strip()
            if not text.startswith(b"{"):
                continue  # blank lines and non-JSON noise some CLI builds print
            try:
                message = json.loads(text)
            except ValueError as exc:
                raise CLIJSONDecodeError(text.decode(errors="replace"), exc) from exc
            if isinstance(message, dict):
                yield message
        code = await child.process.wait()
        if code != 0:
            raise ProcessError(f"the Claude Code CLI ended ({child.exit_description()})", code)

    async def close(self) -> None:
        """Stop the CLI's whole tree and reap it; idempotent, bounded (~``term_grace``)."""
        self._ready = False
        child = self._child
        if child is None:
            return
        try:
            # The CLI ignores stdin EOF mid-turn, so no EOF grace: SIGTERM to its
            # group at once (its handler ends its tool sessions), SIGKILL after
            # term_grace, then the tag sweep. A CLI that already exited is reaped.
            await child.terminate(eof_grace=0, term_grace=self.term_grace)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            # A concurrent close() was interrupted, not this one: finish below.
        finally:
            if child.ending is None:
                child.kill_tree()  # interrupted by a second cancellation: kill now
