"""MCP servers for one agent: the servers an ACP client sends with ``session/new``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio
from pydantic import ValidationError

from dsh.core import Agent, ToolError
from dsh.core.lifecycle import Disposer
from dsh.core.plugins import validation_problems
from dsh.tool_mcp._config import McpServerConfig, check_unique_names
from dsh.tool_mcp._connection import McpServers
from dsh.tool_mcp._errors import McpConfigError

__all__ = ["AttachedServers", "attach_servers"]


class AttachedServers:
    """MCP servers attached to one agent. Awaiting the object's call (it is an
    :data:`~dsh.core.lifecycle.AsyncDisposer`) or :meth:`aclose` detaches the tools and stops
    the servers; idempotent. The agent closing does it too."""

    def __init__(self, agent: Agent, servers: McpServers, tool_names: list[str]) -> None:
        self.agent = agent
        self.servers = servers
        self.tool_names = tool_names
        """The dsh names of the tools given to the agent, in order."""
        self._removers: list[Disposer] = []
        self._unhook: Disposer | None = None
        self.closed = False

    @property
    def server_names(self) -> list[str]:
        """The attached servers' names."""
        return [connection.name for connection in self.servers.connections]

    async def aclose(self) -> None:
        """Take the tools away from the agent and stop the servers (processes gone)."""
        self.closed = True
        removers, self._removers = self._removers, []
        for remove in reversed(removers):
            remove()
        unhook, self._unhook = self._unhook, None
        if unhook is not None:
            unhook()
        await self.servers.aclose()

    async def __call__(self) -> None:
        await self.aclose()


async def attach_servers(
    agent: Agent, servers: Sequence[McpServerConfig | Mapping[str, Any]]
) -> AttachedServers:
    """Connect ``servers`` for ``agent`` only: their tools are added to ``agent.tools``
    (scoped to it: other agents, its children included, do not see them) and stay
    until the returned :class:`AttachedServers` is closed or the agent closes.

    Entries are :class:`McpServerConfig` or raw mappings of its fields (e.g. from
    :func:`servers_from_acp`). Servers start concurrently in the agent's cwd (a
    server's ``cwd`` is relative to it) and in the agent's sandbox; a server that
    cannot start or initialize within its ``start_timeout``, a secret missing from the
    environment, or a tool name the agent already has raises
    :class:`~dsh.tool_mcp.McpError` naming the server, with nothing left running or
    attached. Cancelling the call leaves nothing behind either.
    """
    if agent.closed:
        raise RuntimeError(f"agent {agent.label or agent.id} is closed")
    configs = [_config(entry, index) for index, entry in enumerate(servers)]
    try:
        check_unique_names(configs)
    except ValueError as exc:
        raise McpConfigError(str(exc)) from None
    started = await McpServers.start(
        configs, ctx=agent.ctx, cwd=agent.cwd or agent.ctx.cwd, sandbox=agent.sandbox
    )
    attached = AttachedServers(agent, started, [])
    try:
        for tool in started.tools():
            try:
                attached._removers.append(agent.tools.add(tool))
            except ToolError as exc:
                raise McpConfigError(
                    f"MCP tool {tool.name!r} cannot be given to this agent: {exc};"
                    " rename the server"
                ) from None
            attached.tool_names.append(tool.name)
        if agent.closed:
            raise RuntimeError(f"agent {agent.label or agent.id} closed while MCP servers started")
        attached._unhook = agent.on_close(attached.aclose)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await attached.aclose()
        raise
    return attached


def _config(entry: McpServerConfig | Mapping[str, Any], index: int) -> McpServerConfig:
    if isinstance(entry, McpServerConfig):
        return entry
    try:
        return McpServerConfig.model_validate(entry)
    except ValidationError as exc:
        name = entry.get("name") if isinstance(entry, Mapping) else None
        label = f'"{name}"' if isinstance(name, str) else f"#{index + 1}"
        raise McpConfigError(
            f"MCP server {label}: {validation_problems(exc)}",
            server=name if isinstance(name, str) else None,
        ) from None
