"""MCP tools as dsh tools: names, schemas, results."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from dsh.core import Tool, ToolContext, ToolResult
from dsh.tool_mcp._errors import McpError

if TYPE_CHECKING:
    from dsh.tool_mcp._config import McpServerConfig

__all__ = ["make_tool", "result_text", "tool_name"]

SEPARATOR = "__"
"""Between the server's name and the tool's in a dsh tool name."""
_NOT_A_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9_-]")
_TITLE_ARGUMENTS = 120


class ServerConnection(Protocol):
    """What a tool needs of its server's connection (``McpConnection`` is one)."""

    config: McpServerConfig

    @property
    def name(self) -> str:
        """The server's name."""
        ...

    async def call(self, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call ``tool`` on the server."""
        ...

    async def lost_reason(self, tool: str) -> str:
        """Why the server went away during a call of ``tool``."""
        ...


def tool_name(server: str, tool: str) -> str:
    """The dsh name of ``tool`` of ``server``: ``<server>__<tool>``, with characters a
    dsh tool name cannot hold (``.``, ``/``, spaces...) replaced by ``_``."""
    return f"{server}{SEPARATOR}{_NOT_A_NAME_CHARACTER.sub('_', tool) or '_'}"


def make_tool(connection: ServerConnection, remote: mcp_types.Tool) -> Tool:
    """The dsh tool that calls ``remote`` on ``connection``'s server."""
    config = connection.config
    server = connection.name
    name = tool_name(server, remote.name)
    display = remote.title or (remote.annotations.title if remote.annotations else None)
    description = remote.description or display or f"Tool {remote.name} of MCP server {server}."
    read_only = bool(remote.annotations and remote.annotations.read_only_hint)

    async def run(arguments: Any, tctx: ToolContext) -> ToolResult:
        return await call_tool(connection, remote.name, name, dict(arguments or {}))

    def title(arguments: Any) -> str:
        text = _short_json(arguments)
        return f"{server}: {display or remote.name}" + (f" {text}" if text else "")

    return Tool(
        name,
        description,
        _input_schema(remote.input_schema),
        run,
        parse=_arguments,
        concurrency_safe=read_only,
        permission=config.permission,
        kind="other",
        title=title,
    )


def _input_schema(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The server's JSON Schema for the arguments, as an object schema."""
    result = dict(schema or {})
    result.pop("title", None)
    result.setdefault("type", "object")
    if result.get("type") == "object":
        result.setdefault("properties", {})
    return result


def _arguments(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments are checked by the server against its own schema; here only their shape."""
    if not isinstance(raw, Mapping):
        raise TypeError(f"arguments must be a JSON object, got {type(raw).__name__}")
    return dict(raw)


async def call_tool(
    connection: ServerConnection, remote: str, name: str, arguments: dict[str, Any]
) -> ToolResult:
    """Call ``remote`` and map the outcome; every failure becomes an error result."""
    server = connection.name
    data = {"mcp_server": server, "mcp_tool": remote}
    try:
        result = await connection.call(remote, arguments)
    except McpError as exc:
        return ToolResult(str(exc), is_error=True, data=data)
    except MCPError as exc:
        if exc.code == CONNECTION_CLOSED:
            text = await connection.lost_reason(remote)
        elif exc.code == REQUEST_TIMEOUT:
            limit = connection.config.tool_timeout
            within = f" within {limit:g} s (tool_timeout)" if limit is not None else ""
            text = (
                f'MCP tool "{remote}" of server "{server}" did not answer{within}; the call'
                " was cancelled. Raise tool_timeout in the server's config for slower tools"
            )
        else:
            text = (
                f'MCP server "{server}" refused the call to "{remote}": {exc.message}'
                f" (code {exc.code})"
            )
        return ToolResult(text, is_error=True, data=data)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return ToolResult(
            f'calling MCP tool "{remote}" of server "{server}" failed: {reason}',
            is_error=True,
            data=data,
        )
    text = result_text(result, limit=connection.config.max_output_chars)
    return ToolResult(text, is_error=result.is_error, data=data)


def result_text(result: mcp_types.CallToolResult, *, limit: int = 100_000) -> str:
    """A tool result as text for the model: text blocks as they are, embedded text
    resources with their URI, a placeholder for images, audio, links and binary
    resources; the structured content as JSON when there is nothing else."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    if not text:
        return "(the tool failed without a message)" if result.is_error else "(no output)"
    if len(text) > limit:
        cut = len(text) - limit
        text = text[:limit] + f"\n[output truncated: {cut} more characters]"
    return text


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent):
        return f"[image: {block.mime_type}, {_decoded_size(block.data)} bytes, not shown]"
    if isinstance(block, mcp_types.AudioContent):
        return f"[audio: {block.mime_type}, {_decoded_size(block.data)} bytes, not shown]"
    if isinstance(block, mcp_types.ResourceLink):
        label = block.title or block.name
        return f"[resource link: {label} <{block.uri}>]"
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return f"[resource <{resource.uri}>]\n{resource.text}"
        mime = resource.mime_type or "binary"
        size = _decoded_size(getattr(resource, "blob", ""))
        return f"[resource <{resource.uri}>: {mime}, {size} bytes, not shown]"
    return f"[{kind or 'unknown'} content, not shown]"


def _decoded_size(data: str) -> int:
    """Bytes encoded by the base64 text ``data``."""
    stripped = data.strip()
    return max(0, len(stripped) * 3 // 4 - stripped[-2:].count("="))


def _short_json(arguments: Any) -> str:
    try:
        text = json.dumps(arguments, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = str(arguments)
    if text in ("{}", "null"):
        return ""
    return text if len(text) <= _TITLE_ARGUMENTS else text[:_TITLE_ARGUMENTS] + "…"
