"""One ``tools/call`` of ``dsh mcp``: a delegation through ``ctx.subagents``, or an
exposed tool run as such.

A subagent tool's call starts its row's provider with the row's fixed settings
(persona, tool filter, budget, output schema, depth limit) under a parent agent made
for the call: at the depth the caller's ``_meta.dsh`` lineage names (a dsh caller),
else that of this process's environment, else at depth 0 under the ``dsh-mcp`` row's
``max_depth`` ceiling; a caller already deeper than its limit is refused. Progress
items go to ``report`` (a progress notification each); the result is the child's
output, ``isError`` with the diagnostic for any stop reason but ``completed``, and the
tree-wide usage and the stop reason in ``_meta.dsh``. A cancelled call (the client's
``notifications/cancelled``) aborts the run and disposes it, its process tree with it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from pydantic import ValidationError

from dsh.core import AbortSignal, Agent, Context, ToolContext, text_of
from dsh.mcp._catalog import Served
from dsh.mcp._config import serve_config
from dsh.mcp._progress import ProgressLines
from dsh.subagent import (
    SubagentError,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subagent.kit import Lineage

__all__ = ["META_KEY", "Report", "call_tool"]

META_KEY = "dsh"
"""The ``_meta`` key dsh reads (lineage) and writes (usage, stop reason)."""

Report = Callable[[str], Awaitable[None]]
"""Sends one progress message to the caller (a no-op when it sent no progress token)."""

_DRAIN = 2.0
"""Seconds a settled run's last progress items get to go out before the result."""
_DISPOSE_BOUND = 10.0
"""Seconds a cancelled call waits for its run's teardown at most."""


def _error(text: str, meta: Mapping[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        is_error=True,
        _meta=dict(meta) if meta else None,
    )


def _lineage(ctx: Context, meta: Mapping[str, Any] | None) -> Lineage:
    found = Lineage.from_meta(meta)
    if found is None:
        found = Lineage.from_env(os.environ)
    if found is None:  # not a dsh caller: the ceiling applies
        found = Lineage(0, serve_config(ctx).max_depth)
    return found


async def call_tool(
    ctx: Context,
    served: Served,
    arguments: Mapping[str, Any],
    meta: Mapping[str, Any] | None,
    report: Report,
) -> types.CallToolResult:
    """Run one call of ``served`` (see the module docstring)."""
    try:
        lineage = _lineage(ctx, meta)
    except ValueError as exc:
        return _error(f"invalid dsh lineage in _meta: {exc}")
    refusal = lineage.deeper_than_allowed()
    if refusal is not None:
        return _error(refusal)
    parent = ctx.agents.create(
        meta={"cwd": ctx.cwd, "origin": "mcp", **lineage.session_meta()}, label="dsh mcp"
    )
    try:
        if served.row is None:
            return await _exposed(served, arguments, parent)
        return await _delegate(ctx, served, arguments, parent, report)
    finally:
        with anyio.CancelScope(shield=True):
            await parent.aclose()


async def _exposed(
    served: Served, arguments: Mapping[str, Any], parent: Agent
) -> types.CallToolResult:
    signal = AbortSignal()
    try:
        result = await served.tool.invoke(arguments, ToolContext(parent, "mcp", signal))
    except BaseException:
        signal.abort("cancelled by the MCP client")
        raise
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text_of(result.blocks()))],
        is_error=result.is_error,
    )


async def _delegate(
    ctx: Context,
    served: Served,
    arguments: Mapping[str, Any],
    parent: Agent,
    report: Report,
) -> types.CallToolResult:
    row = served.row
    assert row is not None
    try:
        args = served.tool.parse({k: v for k, v in arguments.items() if k != "run_in_background"})
    except (ValidationError, TypeError, ValueError) as exc:
        return _error(f"invalid arguments for tool {served.tool.name}: {exc}")
    signal = AbortSignal()
    request = SubagentStartRequest(
        args.prompt,
        parent,
        signal,
        label=args.description,
        agent_options=row.agent_options,
        output_schema=row.output_schema,
        max_depth=row.numeric_max_depth,
        tool_filter=row.tool_filter.to_filter() if row.tool_filter else None,
        persona=row.persona,
        budget=row.budget.budget if row.budget is not None else None,
    )
    runtime = SubagentRuntime.of(ctx)
    try:
        run = await runtime.start(row.provider, request)
    except SubagentError as exc:
        return _error(f"subagent could not start: {exc.message}", {META_KEY: {"code": exc.code}})
    failure: Exception | None = None
    try:
        result = await _follow(run, report)
    except Exception as exc:  # the run's result could not be read
        failure = exc
    except BaseException:
        signal.abort("cancelled by the MCP client")
        raise
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_DISPOSE_BOUND):
            await run.dispose()
    usage = runtime.usage(parent).total
    if failure is not None:
        described = (
            f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__
        )
        meta = {META_KEY: {"usage": usage.to_json(), "stopReason": "error", "runId": run.id}}
        return _error(f"subagent run failed: its result could not be read: {described}", meta)
    return _result(result, run.id, usage.to_json())


async def _follow(run: SubagentRun, report: Report) -> SubagentResult:
    """Report the run's progress until it settles; its result."""
    async with anyio.create_task_group() as group:
        lines = ProgressLines()
        relayed = anyio.Event()

        async def relay() -> None:
            async for item in run.progress():
                for message in lines.feed(item):
                    await report(message)
            relayed.set()

        group.start_soon(relay)
        result = await run.result
        with anyio.move_on_after(_DRAIN):  # the items produced before the end go out first
            await relayed.wait()
        group.cancel_scope.cancel()
    for message in lines.flush():
        await report(message)
    return result


def _result(result: SubagentResult, run_id: str, usage: dict[str, Any]) -> types.CallToolResult:
    meta = {META_KEY: {"usage": usage, "stopReason": result.stop_reason, "runId": run_id}}
    if result.stop_reason != "completed":
        lines = [f"subagent run ended {result.stop_reason}"]
        if result.diagnostic:
            lines.append(f"Diagnostic: {result.diagnostic}")
        if result.output:
            lines.append(f"Partial output: {result.output}")
        return _error("\n".join(lines), meta)
    structured = result.structured if isinstance(result.structured, dict) else None
    text = result.output or "(the subagent finished without any output)"
    if structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=False,
        _meta=meta,
    )
