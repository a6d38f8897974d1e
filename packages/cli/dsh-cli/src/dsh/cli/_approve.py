"""Answering ``ask`` permissions on the terminal (``dsh run`` with a TTY).

The approver prints what the agent wants to do on stderr and reads one line from
stdin: ``y`` allows this call, ``a`` allows the tool for the rest of the run, anything
else (Enter, ``n``) refuses. Prompts are asked one at a time, with the live view
held still; a prompt is cancellable (Ctrl-C, the turn being aborted).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TextIO

import anyio

from dsh.core import PermissionDecision, PermissionRequest

__all__ = ["TerminalApprover", "read_line"]


class TerminalApprover:
    """An :data:`~dsh.core.Approver` that asks the person at the terminal."""

    def __init__(
        self,
        hold: Callable[[], AbstractAsyncContextManager[None]],
        *,
        prompt_to: TextIO | None = None,
    ) -> None:
        self._hold = hold
        self._out = prompt_to or sys.stderr
        self._lock = anyio.Lock()

    async def __call__(self, request: PermissionRequest) -> PermissionDecision:
        async with self._lock, self._hold():
            who = request.agent.label or ("lead" if request.agent.depth == 0 else "subagent")
            if request.agent.depth:
                who += f" (depth {request.agent.depth})"
            self._out.write(
                f"\n{who} wants to run {request.tool}: {request.title}\n"
                "  allow? [y]es / [a]lways for this tool / [N]o: "
            )
            self._out.flush()
            answer = (await read_line()).strip().lower()
        if answer in ("y", "yes"):
            return PermissionDecision(True)
        if answer in ("a", "always"):
            return PermissionDecision(True, always=True)
        return PermissionDecision(False, f'the user refused "{request.tool}" ({request.title})')


async def read_line(fd: int | None = None) -> str:
    """One line from stdin without blocking the event loop (cancellable); ``""`` at end
    of input."""
    fd = sys.stdin.fileno() if fd is None else fd
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    while True:
        ready: asyncio.Future[None] = loop.create_future()

        def wake(done: asyncio.Future[None] = ready) -> None:
            if not done.done():
                done.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        data = os.read(fd, 4096)
        if not data:
            break
        chunks.append(data)
        if b"\n" in data:
            break
    return b"".join(chunks).decode("utf-8", "replace").split("\n", 1)[0]
