"""``dsh acp --workspace client``: the session's file and shell tools go through the
ACP client (``fs/*``, ``terminal/*``), as an editor's agents do.

When the client offers ``fs.readTextFile`` / ``fs.writeTextFile`` / ``terminal`` in
``initialize``, each new session's agent gets tools of its own under the names of
the registered ``read_file``, ``write_file``, ``edit_file`` and ``shell`` (the same
description, arguments, permission policy, kind and titles: the model sees no
difference), whose calls become client requests: the editor reads its buffers,
shows and applies the edits, runs the commands in its terminals. The registered
tools are hidden from that agent. Paths stay confined to the session's working
directory; a tool whose capability the client does not offer stays as it is.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from acp import RequestError

from dsh.core import Tool, ToolResult

__all__ = ["WORKSPACES", "client_tools"]

WORKSPACES = ("own", "client")
"""The values of ``dsh acp --workspace``."""

Request = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""Sends one request to the client and returns its result (raises ``RequestError``)."""

_SHELL_TIMEOUT = 120.0


def client_tools(
    registered: Callable[[str], Tool | None],
    caps: Mapping[str, Any],
    request: Request,
    session_id: str,
    cwd: str,
) -> list[Tool]:
    """The client-backed tools for a session (see the module docstring): for each
    registered tool the client can serve, one of the same name."""
    found = caps.get("fs")
    fs: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    reads, writes = bool(fs.get("readTextFile")), bool(fs.get("writeTextFile"))
    served = ClientWorkspace(request, session_id, cwd)
    makers: dict[str, tuple[bool, Callable[[Any, Any], Awaitable[ToolResult]]]] = {
        "read_file": (reads, served.read_file),
        "write_file": (writes, served.write_file),
        "edit_file": (reads and writes, served.edit_file),
        "shell": (caps.get("terminal") is True, served.shell),
    }
    tools = []
    for name, (offered, run) in makers.items():
        original = registered(name)
        if offered and original is not None:
            tools.append(
                Tool(
                    original.name,
                    original.description,
                    original.input_schema,
                    run,
                    parse=original.parse,
                    concurrency_safe=original.concurrency_safe,
                    permission=original.permission,
                    kind=original.kind,
                    title=original.title,
                )
            )
    return tools


class ClientWorkspace:
    """The tools' runs: one client request (or a few) per call."""

    def __init__(self, request: Request, session_id: str, cwd: str) -> None:
        self.request = request
        self.session_id = session_id
        self.cwd = os.path.normpath(cwd)

    def _path(self, path: str) -> str:
        full = os.path.normpath(os.path.join(self.cwd, path))
        if os.path.commonpath([full, self.cwd]) != self.cwd:
            raise _Refused(f"{path} is outside the working directory {self.cwd}; refused")
        return full

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        try:
            return await self.request(method, {"sessionId": self.session_id, **params})
        except RequestError as exc:
            data = f" ({exc.data})" if exc.data else ""
            raise _Refused(f"the client answered {method} with an error: {exc}{data}") from None

    async def read_file(self, args: Any, tctx: Any) -> ToolResult:
        """``fs/read_text_file``."""
        return await _guarded(self._read_file(args))

    async def _read_file(self, args: Any) -> str:
        params: dict[str, Any] = {"path": self._path(args.path), "line": args.offset}
        if args.limit is not None:
            params["limit"] = args.limit
        answer = await self._call("fs/read_text_file", params)
        content = answer.get("content") if isinstance(answer, Mapping) else None
        if not isinstance(content, str):
            raise _Refused("the client answered fs/read_text_file without content")
        return content or "(the file is empty)"

    async def write_file(self, args: Any, tctx: Any) -> ToolResult:
        """``fs/write_text_file``."""
        return await _guarded(self._write(args.path, args.content))

    async def _write(self, path: str, content: str) -> str:
        await self._call("fs/write_text_file", {"path": self._path(path), "content": content})
        return f"Wrote {len(content.encode('utf-8'))} bytes to {path} (through the editor)"

    async def edit_file(self, args: Any, tctx: Any) -> ToolResult:
        """``fs/read_text_file``, the replacement, ``fs/write_text_file``."""
        return await _guarded(self._edit(args))

    async def _edit(self, args: Any) -> str:
        if not args.old_string or args.old_string == args.new_string:
            raise _Refused("old_string must be non-empty and differ from new_string")
        answer = await self._call("fs/read_text_file", {"path": self._path(args.path)})
        text = answer.get("content") if isinstance(answer, Mapping) else None
        if not isinstance(text, str):
            raise _Refused("the client answered fs/read_text_file without content")
        count = text.count(args.old_string)
        if count == 0:
            raise _Refused(f"old_string does not occur in {args.path}")
        if count > 1 and not args.replace_all:
            raise _Refused(
                f"old_string occurs {count} times in {args.path}; add context or set replace_all"
            )
        edited = text.replace(args.old_string, args.new_string)
        await self._write(args.path, edited)
        return f"Edited {args.path}: {count if args.replace_all else 1} replacement(s)"

    async def shell(self, args: Any, tctx: Any) -> ToolResult:
        """``terminal/create``, ``wait_for_exit`` (bounded), ``output``, ``release``."""
        return await _guarded(self._shell(args, tctx))

    async def _shell(self, args: Any, tctx: Any) -> ToolResult:
        created = await self._call(
            "terminal/create",
            {"command": "/bin/sh", "args": ["-c", "exec 2>&1\n" + args.command], "cwd": self.cwd},
        )
        terminal = created.get("terminalId") if isinstance(created, Mapping) else None
        if not isinstance(terminal, str):
            raise _Refused("the client answered terminal/create without a terminalId")
        ids = {"terminalId": terminal}
        timeout = args.timeout or _SHELL_TIMEOUT
        status: Any = None
        try:
            with anyio.CancelScope() as scope:
                unlink = tctx.signal.on_abort(lambda _reason: scope.cancel())
                try:
                    with anyio.move_on_after(timeout):
                        status = await self._call("terminal/wait_for_exit", ids)
                finally:
                    unlink()
            if status is None:
                await self._call("terminal/kill", ids)
            output = await self._call("terminal/output", ids)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._call("terminal/release", ids)
        text = output.get("output", "") if isinstance(output, Mapping) else ""
        if status is None:
            return ToolResult(f"{text}\n[stopped: timed out or cancelled]", is_error=True)
        code = status.get("exitCode") if isinstance(status, Mapping) else None
        signal = status.get("signal") if isinstance(status, Mapping) else None
        end = f"exit status {code}" if code is not None else f"killed by {signal}"
        return ToolResult(f"{text.rstrip(chr(10))}\n[{end}]", is_error=code != 0)


class _Refused(Exception):
    """A call that fails with a message for the model."""


async def _guarded(work: Awaitable[str | ToolResult]) -> ToolResult:
    try:
        outcome = await work
    except _Refused as exc:
        return ToolResult(str(exc), is_error=True)
    return outcome if isinstance(outcome, ToolResult) else ToolResult(outcome)
