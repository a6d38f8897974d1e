"""The ``dsh-tool-mcp`` plugin: MCP servers from a preset row, tools for every agent."""

from __future__ import annotations

from dsh.core import Context, EffectScope, Plugin, ToolError
from dsh.tool_mcp._config import McpPluginConfig
from dsh.tool_mcp._connection import McpServers
from dsh.tool_mcp._errors import McpConfigError

__all__ = ["plugin"]


async def _apply(ctx: Context, config: McpPluginConfig, effects: EffectScope) -> None:
    """Tools from MCP servers (stdio and streamable HTTP)."""
    if not config.servers:
        return
    servers = await McpServers.start(config.servers, ctx=ctx, cwd=ctx.cwd)
    effects.add(servers.aclose)
    for tool in servers.tools():
        try:
            effects.add(ctx.tools.register(tool))
        except ToolError as exc:
            raise McpConfigError(
                f"MCP tool {tool.name!r} cannot be registered: {exc}; rename the server",
            ) from None


plugin = Plugin(
    "dsh-tool-mcp",
    _apply,
    McpPluginConfig,
    description="Tools from MCP servers (stdio and streamable HTTP)",
)
