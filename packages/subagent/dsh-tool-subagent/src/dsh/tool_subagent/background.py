"""Background delegation (``run_in_background``): not built yet, refused loudly."""

from __future__ import annotations

from dsh.core import ToolContext, ToolResult
from dsh.subagent import SubagentRuntime
from dsh.tool_subagent.config import SubagentToolConfig
from dsh.tool_subagent.tool import DelegateArgs, run_foreground

__all__ = ["run_delegation"]


async def run_delegation(
    runtime: SubagentRuntime, config: SubagentToolConfig, args: DelegateArgs, tctx: ToolContext
) -> ToolResult:
    """Run in the foreground unless the model asked for the background."""
    if getattr(args, "run_in_background", False):
        return ToolResult("run_in_background is not available in this build", is_error=True)
    return await run_foreground(runtime, config, args, tctx)
