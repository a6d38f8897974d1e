"""The MCP server of ``dsh mcp``: the official SDK's low-level :class:`Server` whose
``tools/list`` is the preset's :class:`~dsh.mcp._catalog.Catalog` and whose
``tools/call`` runs :func:`~dsh.mcp._calls.call_tool`."""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from dsh.core import Context
from dsh.mcp._calls import call_tool
from dsh.mcp._catalog import Catalog

__all__ = ["build_server"]

_INSTRUCTIONS = (
    "Each tool delegates a self-contained task to a dsh subagent and returns its final"
    " answer; send a progress token to follow what it does."
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-mcp")
    except PackageNotFoundError:
        return "0"


def build_server(ctx: Context, catalog: Catalog, name: str) -> Server[Any]:
    """The server for ``catalog``'s tools, run in ``ctx``."""

    async def list_tools(
        request: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=catalog.listing())

    async def call(
        request: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        served = catalog.tools.get(params.name)
        if served is None:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"unknown tool {params.name!r}")],
                is_error=True,
            )
        meta = dict(params.meta) if params.meta else None
        count = 0

        async def report(message: str) -> None:
            nonlocal count
            count += 1
            await request.session.report_progress(count, None, message)

        return await call_tool(ctx, served, params.arguments or {}, meta, report)

    return Server(
        name,
        version=_version(),
        instructions=_INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call,
    )
