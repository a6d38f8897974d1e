"""The MCP server of ``dsh mcp``: the official SDK's low-level :class:`Server` whose
``tools/list`` is the preset's :class:`~dsh.mcp._catalog.Catalog` and whose
``tools/call`` runs :func:`~dsh.mcp._calls.call_tool`."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from dsh.core import Context
from dsh.mcp._calls import call_tool
from dsh.mcp._catalog import Catalog

__all__ = ["RunningCalls", "build_server"]

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


class RunningCalls:
    """The calls running now, so that a stopping server ends them at once (each answers
    ``isError``: the server is shutting down) instead of waiting for its transport."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()

    def __len__(self) -> int:
        return len(self._scopes)

    def add(self, scope: anyio.CancelScope) -> None:
        """Track a call's scope."""
        self._scopes.add(scope)

    def discard(self, scope: anyio.CancelScope) -> None:
        """Stop tracking a call's scope."""
        self._scopes.discard(scope)

    def cancel_all(self) -> None:
        """Cancel every running call (its delegation is aborted and disposed)."""
        for scope in list(self._scopes):
            scope.cancel()


def build_server(ctx: Context, catalog: Catalog, name: str, running: RunningCalls) -> Server[Any]:
    """The server for ``catalog``'s tools, run in ``ctx`` (its calls in ``running``)."""

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

        with anyio.CancelScope() as scope:
            running.add(scope)
            try:
                return await call_tool(ctx, served, params.arguments or {}, meta, report)
            finally:
                running.discard(scope)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="dsh mcp is shutting down")],
            is_error=True,
        )

    return Server(
        name,
        version=_version(),
        instructions=_INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call,
    )
