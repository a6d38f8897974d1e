"""Live connections to MCP servers.

A :class:`McpConnection` is owned by one task of the context (the SDK's client is a
context manager whose task groups must be entered and left by the same task): that
task starts the transport, negotiates the protocol (``server/discover`` with the
``initialize`` fallback, through the SDK's :class:`mcp.Client`), lists the tools,
then waits until :meth:`McpConnection.aclose` asks it to leave. Tool calls come from
the agents' tasks and go through the client meanwhile.

:class:`McpServers` starts several connections at once and stops them together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
from mcp import Client
from mcp.shared.exceptions import MCPError

from dsh.core.permissions import SandboxError, SandboxPolicy
from dsh.subprocess import ProcessStartError, RunTag, Sandbox, scrubbed_env
from dsh.tool_mcp._config import McpServerConfig
from dsh.tool_mcp._errors import McpConfigError, McpError
from dsh.tool_mcp._transports import StdioTransport, describe_exit, http_transport

if TYPE_CHECKING:
    from dsh.core import Context, Tool

__all__ = ["McpConnection", "McpServers", "McpUnavailable"]

_log = logging.getLogger("dsh.tool_mcp")

_MAX_TOOL_PAGES = 100
"""Pages of ``tools/list`` read at most (a paginator that never ends cannot hang a start)."""
_STDERR_CHARS = 1500
"""Characters of a failed server's stderr quoted in the error."""

try:
    _VERSION = version("dsh-tool-mcp")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    _VERSION = "0"
_CLIENT_INFO = mcp_types.Implementation(name="dsh", version=_VERSION)


class McpUnavailable(McpError):
    """A call to a server that is not (or no longer) connected."""


class McpConnection:
    """One MCP server: :meth:`start` it, :meth:`call` its tools, :meth:`aclose` it."""

    def __init__(
        self, config: McpServerConfig, *, cwd: str, sandbox: SandboxPolicy | None = None
    ) -> None:
        self.config = config
        self.cwd = cwd
        self.sandbox = sandbox
        """The policy the server process runs under (narrowed by ``config.sandbox``)."""
        self.tools: list[mcp_types.Tool] = []
        """The server's tools (those in ``config.tools`` if set), once started."""
        self.transport: StdioTransport | None = None
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._done = asyncio.Event()
        self._failure: BaseException | None = None
        self._closing = False

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def pid(self) -> int | None:
        """The server process's id (stdio servers, once started)."""
        child = self.transport.child if self.transport is not None else None
        return child.pid if child is not None else None

    @property
    def connected(self) -> bool:
        """True between a successful start and the start of :meth:`aclose` (or the
        server going away)."""
        return self._client is not None and not self._closing

    # -- start ------------------------------------------------------------------------

    async def start(self, ctx: Context) -> None:
        """Start the server and list its tools within ``config.start_timeout``;
        :class:`McpError` naming the server otherwise (nothing is left running)."""
        if self._task is not None:
            raise RuntimeError(f'MCP server "{self.name}" was already started')
        self._task = ctx.spawn(self._own)
        try:
            with anyio.move_on_after(self.config.start_timeout) as waited:
                await self._ready.wait()
        except BaseException:
            await self.aclose()
            raise
        if waited.cancelled_caught:
            await self.aclose()
            raise McpError(
                f'MCP server "{self.name}" did not start within'
                f" {self.config.start_timeout:g} s{self._stderr_note()}",
                server=self.name,
            )
        failure = self._failure
        if failure is not None:
            await self.aclose()
            raise self._start_error(failure) from failure
        if self._client is None:  # stopped (or cancelled) while starting
            await self.aclose()
            raise McpError(f'MCP server "{self.name}" was stopped while starting', server=self.name)

    async def _own(self) -> None:
        """The owner task: connect, list, wait for :meth:`aclose`, disconnect."""
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with Client(
                    self._transport(), mode="auto", cache=None, client_info=_CLIENT_INFO
                ) as client:
                    self.tools = await self._list_tools(client)
                    self._client = client
                    self._ready.set()
                    await self._stop.wait()
                    self._client = None
        except Exception as exc:
            if not self._ready.is_set():
                self._failure = exc
            else:
                _log.warning('MCP server "%s": disconnecting failed: %r', self.name, exc)
        finally:
            self._client = None
            self._ready.set()
            self._done.set()

    def _transport(self) -> Any:
        config = self.config
        if config.kind == "stdio":
            assert config.command is not None
            env = scrubbed_env(config.env, passthrough=config.passthrough_env)
            cwd = self._server_cwd()
            policy = (self.sandbox or SandboxPolicy()).narrowed(config.sandbox, strict=False)
            allow = tuple(os.path.join(cwd, path) for path in config.allow_write)
            self.transport = StdioTransport(
                [config.command, *config.args],
                env=env,
                cwd=cwd,
                what=f'MCP server "{self.name}"',
                sandbox=Sandbox(policy, allow_write=allow),
                tag=RunTag(),
                eof_grace=config.eof_grace,
                term_grace=config.term_grace,
                max_message_bytes=config.max_message_bytes,
                on_broken=self._broken,
            )
            return self.transport
        assert config.url is not None
        return http_transport(
            config.url, headers=config.resolved_headers(), sse=config.kind == "sse"
        )

    def _broken(self, reason: str) -> None:
        """The transport broke (a message over the limit): leave the client, which
        stops the server. Pending calls already failed (their read side ended)."""
        self._stop.set()

    @property
    def failure(self) -> str | None:
        """Why the connection broke (a stdio server's message over ``max_message_bytes``)."""
        return self.transport.failure if self.transport is not None else None

    def _server_cwd(self) -> str:
        configured = self.config.cwd
        if configured is None:
            return self.cwd
        return os.path.normpath(os.path.join(self.cwd, os.path.expanduser(configured)))

    async def _list_tools(self, client: Client) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        wanted = self.config.tools
        if wanted is None:
            return tools
        offered = {tool.name: tool for tool in tools}
        missing = [name for name in wanted if name not in offered]
        if missing:
            known = ", ".join(offered) or "none"
            raise McpConfigError(
                f'MCP server "{self.name}" offers no tool named {", ".join(missing)}'
                f" (its tools: {known})",
                server=self.name,
            )
        return [offered[name] for name in dict.fromkeys(wanted)]

    def _start_error(self, failure: BaseException) -> McpError:
        leaf = _leaf(failure)
        if isinstance(leaf, McpError):
            return leaf
        if self.failure is not None:
            return McpError(self.failure, server=self.name)
        what = f'MCP server "{self.name}"'
        if isinstance(leaf, ProcessStartError):  # its message names the server
            return McpError(str(leaf), server=self.name)
        child = self.transport.child if self.transport is not None else None
        if child is not None and child.returncode is not None:
            return McpError(
                f"{what} exited before it was ready ({describe_exit(child)}){self._stderr_note()}",
                server=self.name,
            )
        if isinstance(leaf, MCPError):
            reason = f"it answered the handshake with an error: {leaf.message} (code {leaf.code})"
        else:
            reason = f"{type(leaf).__name__}: {leaf}" if str(leaf) else type(leaf).__name__
        where = f" at {self.config.url}" if self.config.url else ""
        return McpError(
            f"{what}{where} could not be initialized: {reason}{self._stderr_note()}",
            server=self.name,
        )

    def _stderr_note(self) -> str:
        child = self.transport.child if self.transport is not None else None
        if child is None:
            return ""
        tail = child.stderr_tail.text(_STDERR_CHARS)
        return f"; its stderr ends with:\n{tail}" if tail else ""

    # -- use --------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call ``tool`` (the server's name for it). Raises :class:`McpUnavailable`
        when the server is not connected, ``MCPError`` for protocol errors."""
        client = self._client
        if client is None or self._closing:
            raise McpUnavailable(self.unavailable_reason(), server=self.name)
        return await client.call_tool(
            tool, arguments, read_timeout_seconds=self.config.tool_timeout
        )

    async def lost_reason(self, tool: str) -> str:
        """Why a call to ``tool`` found the connection closed (waits briefly for a
        stdio server's exit to be seen, to say how it ended)."""
        if self.failure is not None:
            return self.failure
        child = self.transport.child if self.transport is not None else None
        if child is not None and child.returncode is None and not self._closing:
            with anyio.move_on_after(0.5):
                await child.wait()
        if self._closing or (child is not None and child.returncode is not None):
            return self.unavailable_reason()
        return f'MCP server "{self.name}" closed the connection during the call to "{tool}"'

    def unavailable_reason(self) -> str:
        """Why calls cannot reach the server now."""
        if self.failure is not None:
            return self.failure
        if self._closing:
            return f'MCP server "{self.name}" has been stopped'
        child = self.transport.child if self.transport is not None else None
        if child is not None and child.returncode is not None:
            return f'MCP server "{self.name}" is no longer running ({describe_exit(child)})'
        return f'MCP server "{self.name}" is not connected'

    # -- stop -------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Disconnect and stop the server (its process tree gone). Idempotent;
        bounded in time; shielded from the caller's cancellation."""
        self._closing = True
        self._stop.set()
        task = self._task
        if task is None:
            return
        with anyio.CancelScope(shield=True):
            if not self._ready.is_set() and self._scope is not None:
                self._scope.cancel()  # still starting: nothing to disconnect gracefully
            with anyio.move_on_after(self._close_bound()):
                await self._done.wait()
            if not self._done.is_set():
                _log.warning(
                    'MCP server "%s" is slow to stop; cancelling its connection', self.name
                )
                if self._scope is not None:
                    self._scope.cancel()
                else:
                    task.cancel()
                with anyio.move_on_after(self._close_bound()):
                    await self._done.wait()
            if not task.done():
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                    await asyncio.wait_for(asyncio.shield(task), timeout=1.0)

    def _close_bound(self) -> float:
        if self.config.kind == "stdio":
            return self.config.eof_grace + self.config.term_grace + 5.0
        return 5.0


def _leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside ``exc`` (task groups wrap failures)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class McpServers:
    """Several MCP servers started together and stopped together."""

    def __init__(self, connections: Sequence[McpConnection]) -> None:
        self.connections = list(connections)

    @classmethod
    async def start(
        cls,
        configs: Sequence[McpServerConfig],
        *,
        ctx: Context,
        cwd: str,
        sandbox: SandboxPolicy | None = None,
    ) -> McpServers:
        """Start every server concurrently, stdio servers under ``sandbox`` (default: the
        context's). If any fails, the others are stopped and :class:`McpError` names
        each failed server."""
        policy = sandbox if sandbox is not None else ctx.sandbox
        for config in configs:  # a row narrows, never widens: fail before starting any
            try:
                policy.narrowed(config.sandbox, what=f'MCP server "{config.name}"')
            except SandboxError as exc:
                raise McpConfigError(str(exc)) from None
        group = cls([McpConnection(config, cwd=cwd, sandbox=policy) for config in configs])
        failures: list[McpError] = []

        async def start_one(connection: McpConnection) -> None:
            try:
                await connection.start(ctx)
            except McpError as exc:
                failures.append(exc)

        try:
            async with anyio.create_task_group() as tg:
                for connection in group.connections:
                    tg.start_soon(start_one, connection)
        except BaseException:
            await group.aclose()
            raise
        if failures:
            await group.aclose()
            if len(failures) == 1:
                raise failures[0]
            raise McpError("\n".join(str(f) for f in failures))
        return group

    def tools(self) -> list[Tool]:
        """dsh tools for every server's tools; two that would get the same name raise
        :class:`McpConfigError` naming both."""
        from dsh.tool_mcp._tools import make_tool, tool_name

        origin: dict[str, tuple[str, str]] = {}
        made: list[Tool] = []
        for connection in self.connections:
            for remote in connection.tools:
                name = tool_name(connection.name, remote.name)
                if name in origin:
                    server, tool = origin[name]
                    raise McpConfigError(
                        f'MCP tools "{tool}" of server "{server}" and "{remote.name}" of server'
                        f' "{connection.name}" would both be named "{name}"; rename a server'
                        " or pick tools with `tools = [...]`",
                        server=connection.name,
                    )
                origin[name] = (connection.name, remote.name)
                made.append(make_tool(connection, remote))
        return made

    def get(self, name: str) -> McpConnection | None:
        """The connection to the server called ``name``."""
        for connection in self.connections:
            if connection.name == name:
                return connection
        return None

    async def aclose(self) -> None:
        """Stop every server (concurrently); shielded, bounded, idempotent."""
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for connection in self.connections:
                    tg.start_soon(connection.aclose)
