"""The shared workspace (``workspace = "shared"``): the parent serves the child's files
and terminals with its own tools.

The agent is told in ``initialize`` that the client reads and writes text files and
runs terminals; its ``fs/read_text_file``, ``fs/write_text_file`` and ``terminal/*``
requests are answered here by calling the tools the delegating agent has, found by
name through its tool view (the context's registry, as the row's ``workspace_tools``
names them): the same confinement, protected paths, sandbox and permissions as the
parent's own calls (``ask`` goes to the parent's approver; unattended, it is
refused). A row whose sandbox is read-only refuses writes and terminals: the row
narrows, never widens. No tool package is imported: a read needs the file tool's
``data`` (the exact text), a terminal the shell tool's
:data:`~dsh.subprocess.TERMINAL_EXTENSION`.

Every served request is a progress item of the run (``tool_call``, then
``tool_update``), and every terminal dies with the run (:meth:`SharedWorkspace.close`,
:meth:`SharedWorkspace.kill_now`; the watchdog if dsh dies).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from dsh.core import AbortSignal, Agent, Tool, ToolContext, ToolResult
from dsh.subagent import SubagentProgress
from dsh.subagent_acp._config import WorkspaceTools
from dsh.subagent_acp._connection import RemoteError
from dsh.subprocess import TERMINAL_EXTENSION, ProcessStartError, Terminal, env_from_pairs

__all__ = ["WORKSPACE_METHODS", "SharedWorkspace"]

WORKSPACE_METHODS = frozenset(
    {
        "fs/read_text_file",
        "fs/write_text_file",
        "terminal/create",
        "terminal/output",
        "terminal/wait_for_exit",
        "terminal/kill",
        "terminal/release",
    }
)
"""The client methods a shared workspace answers."""

_INVALID = -32602
_NOT_FOUND = -32601
_FAILED = -32603
_EXCERPT = 400

Emit = Callable[[SubagentProgress], None]


class SharedWorkspace:
    """Answers one run's ``fs/*`` and ``terminal/*`` requests (see the module docstring)."""

    def __init__(
        self,
        *,
        parent: Agent,
        names: WorkspaceTools,
        signal: AbortSignal,
        prefix: str,
        read_only: bool,
        max_bytes: int,
        emit: Callable[[], Emit | None],
    ) -> None:
        self.parent = parent
        self.names = names
        self.signal = signal
        self.prefix = prefix
        """Of the call ids of served requests (the run's id)."""
        self.read_only = read_only
        self.max_bytes = max_bytes
        """The most text one read answers with."""
        self._emit = emit
        self._ids = itertools.count(1)
        self.terminals: dict[str, Terminal] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self.served = 0
        """Requests served (answered without an error)."""
        self.closed = False
        """Set by :meth:`close` and :meth:`kill_now`: no terminal starts any more."""

    async def handle(self, method: str, params: Any) -> Any:
        """Answer ``method`` (one of :data:`WORKSPACE_METHODS`)."""
        if not isinstance(params, Mapping):
            raise RemoteError(_INVALID, f"{method}: params must be an object")
        if self.closed:
            raise RemoteError(_FAILED, f"{method}: the run is over")
        if method == "fs/read_text_file":
            answer = await self._read(params)
        elif method == "fs/write_text_file":
            answer = await self._write(params)
        elif method == "terminal/create":
            answer = await self._create(params)
        else:
            answer = await self._terminal_request(method, params)
        self.served += 1
        return answer

    # -- files ------------------------------------------------------------------------

    async def _read(self, params: Mapping[str, Any]) -> dict[str, Any]:
        path = _string(params, "path", "fs/read_text_file")
        line = _count(params, "line", "fs/read_text_file")
        limit = _count(params, "limit", "fs/read_text_file")
        tool = self._tool(self.names.read, "fs/read_text_file", "a file tool (dsh-tool-fs)")
        call_id = self._begin("read", f"Read {path}", {"path": path, "line": line, "limit": limit})
        try:
            text = await self._read_all(tool, call_id, path, max(line or 1, 1), limit)
        except RemoteError as exc:
            self._end(call_id, "failed", exc.message)
            raise
        self._end(call_id, "completed", f"{len(text)} characters")
        return {"content": text}

    async def _read_all(
        self, tool: Tool, call_id: str, path: str, offset: int, limit: int | None
    ) -> str:
        """The lines asked for, in as many calls as the tool's caps need."""
        if limit == 0:
            return ""
        parts: list[str] = []
        size = 0
        while True:
            arguments: dict[str, Any] = {"path": path, "offset": offset}
            if limit is not None:
                arguments["limit"] = limit
            result = await self._invoke(tool, arguments, call_id, "fs/read_text_file")
            data = result.data
            if not isinstance(data, Mapping) or not isinstance(data.get("text"), str):
                raise RemoteError(
                    _FAILED,
                    f'fs/read_text_file: the parent\'s tool "{tool.name}" does not give a'
                    " file's exact text (its result has no data.text); name a dsh-tool-fs"
                    " read_file in the row's workspace_tools.read",
                )
            text: str = data["text"]
            parts.append(text)
            size += len(text.encode("utf-8"))
            if size > self.max_bytes:
                raise RemoteError(
                    _FAILED,
                    f"fs/read_text_file: {path} is larger than {self.max_bytes} bytes (the row's"
                    " max_message_bytes); read it in parts with line and limit",
                )
            if data.get("complete", True):
                return "".join(parts)
            got = text.count("\n")
            if got == 0 or not text.endswith("\n"):
                raise RemoteError(
                    _FAILED,
                    f"fs/read_text_file: line {offset} of {path} is longer than the parent's"
                    f' tool "{tool.name}" reads at once (its max_read_bytes)',
                )
            offset += got
            if limit is not None:
                limit -= got
                if limit <= 0:
                    return "".join(parts)

    async def _write(self, params: Mapping[str, Any]) -> dict[str, Any]:
        path = _string(params, "path", "fs/write_text_file")
        content = params.get("content")
        if not isinstance(content, str):
            raise RemoteError(_INVALID, "fs/write_text_file: content must be a string")
        self._refuse_if_read_only("fs/write_text_file", f"write {path}")
        tool = self._tool(self.names.write, "fs/write_text_file", "a file tool (dsh-tool-fs)")
        call_id = self._begin("edit", f"Write {path}", {"path": path, "bytes": len(content)})
        try:
            result = await self._invoke(
                tool, {"path": path, "content": content}, call_id, "fs/write_text_file"
            )
        except RemoteError as exc:
            self._end(call_id, "failed", exc.message)
            raise
        self._end(call_id, "completed", _text(result))
        return {}

    # -- terminals --------------------------------------------------------------------

    async def _create(self, params: Mapping[str, Any]) -> dict[str, Any]:
        what = "terminal/create"
        command = _string(params, "command", what)
        args = params.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise RemoteError(_INVALID, f"{what}: args must be a list of strings")
        line = shlex.join([command, *args]) if args else command
        env = _env(params.get("env"))
        cwd = params.get("cwd")
        if cwd is not None and not (isinstance(cwd, str) and os.path.isabs(cwd)):
            raise RemoteError(_INVALID, f"{what}: cwd must be an absolute path")
        limit = _count(params, "outputByteLimit", what)
        self._refuse_if_read_only(what, f"run `{line}`")
        tool = self._tool(self.names.shell, what, "a shell tool (dsh-tool-shell)")
        opener = tool.extensions.get(TERMINAL_EXTENSION)
        if opener is None:
            raise RemoteError(
                _NOT_FOUND,
                f'{what}: the parent\'s tool "{tool.name}" cannot run a command in the'
                " background (it offers no terminal); name a dsh-tool-shell tool in the row's"
                " workspace_tools.shell",
            )
        try:
            parsed = tool.parse({"command": line})
        except (ValidationError, TypeError, ValueError) as exc:
            raise RemoteError(_INVALID, f"{what}: {exc}") from None
        call_id = self._begin("execute", f"Run `{line}`", {"command": line, "cwd": cwd})
        tctx = ToolContext(self.parent, call_id, self.signal)
        try:
            if tool.permission is not None:
                decision = await tctx.check_permission(tool, parsed)
                if not decision.allowed:
                    raise RemoteError(_FAILED, f"{what}: {decision.reason}")
            try:
                terminal: Terminal = await opener(
                    parsed, tctx, cwd=cwd, env=env, output_byte_limit=limit
                )
            except ProcessStartError as exc:
                raise RemoteError(_FAILED, f"{what}: {exc}") from None
        except RemoteError as exc:
            self._end(call_id, "failed", exc.message)
            raise
        if self.closed or self.signal.aborted:  # the run ended while it started
            await terminal.release()  # it must not outlive the run
            self._end(call_id, "failed", "the run is over")
            raise RemoteError(_FAILED, f"{what}: the run is over")
        self.terminals[call_id] = terminal
        watcher = asyncio.get_running_loop().create_task(self._watch(call_id, terminal))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        return {"terminalId": call_id}

    async def _watch(self, call_id: str, terminal: Terminal) -> None:
        await terminal.wait()
        output, _cut = terminal.output()
        failed = terminal.exit_code != 0
        status = f"exit status {terminal.exit_code}" if not terminal.signal else terminal.signal
        self._end(call_id, "failed" if failed else "completed", f"{output[-_EXCERPT:]}[{status}]")

    async def _terminal_request(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        terminal_id = _string(params, "terminalId", method)
        terminal = self.terminals.get(terminal_id)
        if terminal is None:
            raise RemoteError(_INVALID, f"{method}: no terminal {terminal_id!r} (released?)")
        if method == "terminal/output":
            output, truncated = terminal.output()
            answer: dict[str, Any] = {"output": output, "truncated": truncated}
            if terminal.exited:
                answer["exitStatus"] = _exit_status(terminal)
            return answer
        if method == "terminal/wait_for_exit":
            await terminal.wait()
            return _exit_status(terminal)
        if method == "terminal/kill":
            await terminal.kill()
            return {}
        del self.terminals[terminal_id]  # terminal/release
        await terminal.release()
        return {}

    # -- the run's end ----------------------------------------------------------------

    async def close(self) -> None:
        """Release every terminal (the tree of each is stopped) and stop watching; a
        terminal that finishes starting later is released at once."""
        self.closed = True
        terminals, self.terminals = list(self.terminals.values()), {}
        for terminal in terminals:
            with contextlib.suppress(Exception):
                await terminal.release()
        for watcher in list(self._watchers):
            watcher.cancel()

    def kill_now(self) -> None:
        """SIGKILL every terminal's tree now (synchronous)."""
        self.closed = True
        for terminal in self.terminals.values():
            terminal.kill_now()
        for watcher in list(self._watchers):
            watcher.cancel()

    # -- helpers ----------------------------------------------------------------------

    def _tool(self, name: str | None, method: str, kind: str) -> Tool:
        tool = self.parent.tools.get(name) if name else None
        if tool is None:
            raise RemoteError(
                _NOT_FOUND,
                f"{method}: the parent agent has no tool {name!r} to serve it with ({kind});"
                " give the parent that tool, or name its tool in the row's workspace_tools",
            )
        return tool

    def _refuse_if_read_only(self, method: str, what: str) -> None:
        if self.read_only:
            raise RemoteError(
                _FAILED,
                f"{method}: refused to {what}: the row's sandbox is read-only",
            )

    async def _invoke(
        self, tool: Tool, arguments: Mapping[str, Any], call_id: str, method: str
    ) -> ToolResult:
        result = await tool.invoke(arguments, ToolContext(self.parent, call_id, self.signal))
        if result.is_error:
            raise RemoteError(_FAILED, f"{method}: {_text(result)}")
        return result

    def _begin(self, kind: str, title: str, arguments: Mapping[str, Any]) -> str:
        call_id = f"{self.prefix}-ws-{next(self._ids)}"
        emit = self._emit()
        if emit is not None:
            emit(
                SubagentProgress(
                    "tool_call",
                    tool_call_id=call_id,
                    name=kind,
                    title=title,
                    arguments={k: v for k, v in arguments.items() if v is not None},
                )
            )
        return call_id

    def _end(self, call_id: str, status: str, text: str) -> None:
        emit = self._emit()
        if emit is not None:
            emit(
                SubagentProgress(
                    "tool_update",
                    tool_call_id=call_id,
                    status=status,  # type: ignore[arg-type]
                    text=text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…",
                )
            )


def _string(params: Mapping[str, Any], key: str, method: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise RemoteError(_INVALID, f"{method}: {key} must be a non-empty string")
    return value


def _count(params: Mapping[str, Any], key: str, method: str) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RemoteError(_INVALID, f"{method}: {key} must be a number of at least 0")
    return value


def _env(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    try:
        return env_from_pairs(value)
    except ValueError:
        problem = "terminal/create: env must be a list of {name, value}"
        raise RemoteError(_INVALID, problem) from None


def _exit_status(terminal: Terminal) -> dict[str, Any]:
    status = {"exitCode": terminal.exit_code, "signal": terminal.signal}
    return {key: value for key, value in status.items() if value is not None}


def _text(result: ToolResult) -> str:
    return "".join(
        str(block.get("text", "")) for block in result.blocks() if block.get("type") == "text"
    )
