"""dsh.tool_mcp — tools from MCP servers, with the official ``mcp`` SDK.

* The ``dsh-tool-mcp`` plugin (:data:`plugin`): servers listed in a preset row
  start when the row loads and stop when it unloads (or the context closes); their
  tools are registered for every agent as ``<server>__<tool>``.
* :func:`attach_servers`: servers for one agent only (the ``mcpServers`` an ACP
  client sends with ``session/new``), stopped by the returned disposer or when the
  agent closes; :func:`servers_from_acp` converts ACP's entries.

Stdio servers run with a credential-scrubbed environment, in a process group of
their own registered with dsh's watchdog and tagged with a run tag, so they never
outlive dsh, even when dsh is killed outright.
"""

from dsh.tool_mcp._attach import AttachedServers, attach_servers
from dsh.tool_mcp._config import McpPluginConfig, McpServerConfig, Transport, servers_from_acp
from dsh.tool_mcp._connection import McpConnection, McpServers, McpUnavailable
from dsh.tool_mcp._errors import McpConfigError, McpError
from dsh.tool_mcp._plugin import plugin
from dsh.tool_mcp._tools import result_text, tool_name

__all__ = [
    "AttachedServers",
    "McpConfigError",
    "McpConnection",
    "McpError",
    "McpPluginConfig",
    "McpServerConfig",
    "McpServers",
    "McpUnavailable",
    "Transport",
    "attach_servers",
    "plugin",
    "result_text",
    "servers_from_acp",
    "tool_name",
]
