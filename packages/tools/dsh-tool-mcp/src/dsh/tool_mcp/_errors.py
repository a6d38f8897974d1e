"""Errors of dsh.tool_mcp."""

from __future__ import annotations

from dsh.core import DshError

__all__ = ["McpConfigError", "McpError"]


class McpError(DshError):
    """An MCP server could not be configured, started or listed; the message names
    the server (``server``, when there is one) and says why."""

    def __init__(self, message: str, *, server: str | None = None) -> None:
        super().__init__(message)
        self.server = server


class McpConfigError(McpError):
    """An MCP server's configuration is unusable (bad entry, secret not in the
    environment, duplicate name, tool-name clash)."""
