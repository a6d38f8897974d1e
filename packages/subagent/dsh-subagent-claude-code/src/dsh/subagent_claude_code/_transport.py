"""A claude-agent-sdk ``Transport`` over the CLI process the provider kit spawned.

The SDK's own subprocess transport passes the CLI all of this process's
environment, keeps it in our process group, and on close waits 5 s for it to
exit on stdin EOF (it does not, mid-turn) before SIGTERM; a second cancellation
inside that window leaks the CLI and its tool processes. :class:`CLITransport`
runs the SDK's control protocol (initialize, permission callbacks) unchanged
over a :class:`~dsh.subprocess.ChildProcess` instead, whose teardown the run
owns. It keeps stdin open until then, even after the SDK ends its input, so that
:meth:`CLITransport.interrupt` can still reach the CLI mid-turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

from claude_agent_sdk import CLIConnectionError, CLIJSONDecodeError, ProcessError, Transport

from dsh.subprocess import ChildProcess

__all__ = ["CLITransport"]

_interrupt_ids = itertools.count(1)


class CLITransport(Transport):
    """The Claude Code CLI as a child process, spoken to in stream-json over stdio."""

    def __init__(self, child: ChildProcess) -> None:
        self.child = child
        self.turn_started = False
        """True once the prompt is written and the CLI has said something since: an
        interrupt then ends the turn (earlier, stopping the CLI is as good and faster)."""
        self._prompt_written = False
        self._ready = True
        self._write_lock = asyncio.Lock()

    async def connect(self) -> None:
        """Nothing to do: the run spawned the CLI."""

    def is_ready(self) -> bool:
        return self._ready

    async def write(self, data: str) -> None:
        """Write one stream-json line to the CLI's stdin."""
        async with self._write_lock:
            child = self.child
            if not self._ready or child.stdin.is_closing() or child.returncode is not None:
                raise CLIConnectionError(
                    f"cannot write to the Claude Code CLI ({child.exit_description()})"
                )
            try:
                child.stdin.write(data.encode())
                await child.stdin.drain()
            except (ConnectionError, OSError) as exc:
                self._ready = False
                raise CLIConnectionError(f"writing to the Claude Code CLI failed: {exc}") from exc
        if not self._prompt_written:
            with contextlib.suppress(ValueError, AttributeError):
                self._prompt_written = json.loads(data).get("type") == "user"

    async def end_input(self) -> None:
        """Keep stdin open (see the module docstring); the run's teardown closes it."""

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        """The CLI's stdout as JSON objects; a non-zero exit raises ``ProcessError``."""
        return self._read()

    async def _read(self) -> AsyncIterator[dict[str, Any]]:
        child = self.child
        while True:
            try:
                line = await child.stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                line = exc.partial  # EOF, maybe after a last unterminated line
            except asyncio.LimitOverrunError as exc:
                raise CLIConnectionError(f"the CLI wrote a line over {exc.consumed} bytes") from exc
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
                if self._prompt_written and message.get("type") != "control_response":
                    self.turn_started = True
                yield message
        code = await child.wait()
        if code != 0:
            raise ProcessError(f"the Claude Code CLI ended ({child.exit_description()})", code)

    async def interrupt(self) -> bool:
        """Ask the CLI to end its turn (the ``interrupt`` control request
        ``ClaudeSDKClient.interrupt`` sends; the SDK ignores the reply to a request it
        did not make); the CLI then sends an ``error_during_execution`` result. False
        when the turn has not started or the request could not be written."""
        if not self.turn_started:
            return False
        request = {"subtype": "interrupt"}
        line = {"type": "control_request", "request_id": f"dsh_{next(_interrupt_ids)}"}
        try:
            await self.write(json.dumps({**line, "request": request}) + "\n")
        except CLIConnectionError:
            return False
        return True

    async def close(self) -> None:
        """Stop writing (the run tears the process down)."""
        self._ready = False
