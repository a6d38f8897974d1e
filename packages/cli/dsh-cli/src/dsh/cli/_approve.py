"""Answering ``ask`` permissions on the terminal (``dsh run`` with a TTY).

The approver prints on stderr what the agent wants to do — the tool, its title, and
every argument in full: a shell command whole, every line, indented; control
characters shown as escapes (``\\x1b``, ``\\r``), never sent raw, so the text cannot
redraw itself into something else — and reads the answer: on a terminal one key, no
Enter (``y`` allows this call, ``a`` the tool for the rest of the run, anything else
refuses; keys typed before the prompt appeared are discarded); otherwise one line.
Prompts are asked one at a time, with the live view held still; a prompt is
cancellable (Ctrl-C, the turn being aborted) and always puts the terminal back.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import termios
import tty
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, TextIO

import anyio

from dsh.cli._interrupt import holding_terminal
from dsh.cli._safe_text import visible
from dsh.core import PermissionDecision, PermissionRequest

__all__ = ["TerminalApprover", "read_key", "read_line", "render_request", "single_keys"]

MAX_LINES = 40
"""Lines of one argument shown before the rest is cut (never for ``execute`` tools)."""
MAX_LINE_CHARS = 400
"""Characters of one line shown before it is cut (never for ``execute`` tools)."""

_PROMPT = "  allow? [y]es / [a]lways for this tool / [n]o (default): "


class TerminalApprover:
    """An :data:`~dsh.core.Approver` that asks the person at the terminal."""

    def __init__(
        self,
        hold: Callable[[], AbstractAsyncContextManager[None]],
        *,
        prompt_to: TextIO | None = None,
        answer_from: int | None = None,
    ) -> None:
        self._hold = hold
        self._out = prompt_to or sys.stderr
        self._fd = answer_from
        self._lock = anyio.Lock()

    async def __call__(self, request: PermissionRequest) -> PermissionDecision:
        fd = sys.stdin.fileno() if self._fd is None else self._fd
        async with self._lock, self._hold():
            if os.isatty(fd):
                with single_keys(fd):  # before the prompt shows: what is typed after counts
                    self._ask(request)
                    answer = (await read_key(fd)).lower()
            else:
                self._ask(request)
                answer = (await read_line(fd)).strip().lower()
            allowed = answer in ("y", "yes", "a", "always")
            always = answer in ("a", "always")
            self._out.write(("always" if always else "yes" if allowed else "no") + "\n")
            self._out.flush()
        if always:
            return PermissionDecision(True, always=True)
        if allowed:
            return PermissionDecision(True)
        return PermissionDecision(False, f'the user refused "{request.tool}" ({request.title})')

    def _ask(self, request: PermissionRequest) -> None:
        self._out.write("\n" + render_request(request) + _PROMPT)
        self._out.flush()


def render_request(request: PermissionRequest) -> str:
    """What the prompt shows: who wants to run what, then every argument, whole for
    tools that execute (``kind == "execute"``), control characters made visible."""
    agent = request.agent
    who = visible(agent.label, one_line=True) if agent.label else None
    who = who or ("lead" if agent.depth == 0 else "subagent")
    if agent.depth:
        who += f" (depth {agent.depth})"
    tool, title = visible(request.tool, one_line=True), visible(request.title, one_line=True)
    lines = [f"{who} wants to run {tool}: {title}"]
    whole = request.kind == "execute"
    for key, value in (request.arguments or {}).items():
        if value is None:
            continue
        lines.extend(_argument(visible(str(key), one_line=True), value, whole=whole))
    return "\n".join(lines) + "\n"


def _argument(key: str, value: Any, *, whole: bool) -> list[str]:
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, indent=2, default=str)
        except (TypeError, ValueError):
            text = str(value)
    rows = text.split("\n")
    if not whole and len(rows) == 1 and len(text) <= 100 and text.strip() == text and text:
        return [f"  {key}: {visible(text)}"]
    shown: list[str] = [f"  {key}:"]
    for number, row in enumerate(rows):
        if not whole and number >= MAX_LINES:
            shown.append(f"    [… {len(rows) - number} more lines not shown]")
            break
        cut = ""
        if not whole and len(row) > MAX_LINE_CHARS:
            row, cut = row[:MAX_LINE_CHARS], f"[… {len(row) - MAX_LINE_CHARS} more characters]"
        shown.append(f"    {visible(row)}{cut}")
    return shown


@contextmanager
def single_keys(fd: int) -> Iterator[None]:
    """While inside, terminal ``fd`` gives each key at once, unechoed (cbreak mode; put
    back on every path, a forced exit included); input typed before is discarded."""
    saved = termios.tcgetattr(fd)
    with holding_terminal(fd, saved):
        try:
            tty.setcbreak(fd, termios.TCSANOW)
            termios.tcflush(fd, termios.TCIFLUSH)  # type-ahead must not answer a prompt
            yield
        finally:
            termios.tcsetattr(fd, termios.TCSANOW, saved)


async def read_key(fd: int) -> str:
    """One key from terminal ``fd`` (in :func:`single_keys` mode: no Enter needed);
    ``""`` at end of input."""
    return (await _read_ready(fd, 64)).decode("utf-8", "replace")[:1]


async def read_line(fd: int | None = None) -> str:
    """One line from stdin without blocking the event loop (cancellable); ``""`` at end
    of input."""
    fd = sys.stdin.fileno() if fd is None else fd
    chunks: list[bytes] = []
    while True:
        data = await _read_ready(fd, 4096)
        if not data:
            break
        chunks.append(data)
        if b"\n" in data:
            break
    return b"".join(chunks).decode("utf-8", "replace").split("\n", 1)[0]


async def _read_ready(fd: int, size: int) -> bytes:
    """``os.read(fd, size)`` once ``fd`` is readable, waiting in the loop (cancellable)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
    return os.read(fd, size)
