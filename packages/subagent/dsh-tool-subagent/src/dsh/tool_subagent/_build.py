"""The tool instance for one ``subagent`` row: foreground, or with ``run_in_background``.

Above both :mod:`._tool` (the arguments and the foreground call) and
:mod:`._background` (the background call), so neither needs the other's caller.
"""

from __future__ import annotations

from functools import partial

from dsh.core import Tool, ToolContext, ToolResult
from dsh.subagent import SubagentProvider, SubagentRuntime
from dsh.tool_subagent._config import SubagentToolConfig
from dsh.tool_subagent._tool import (
    DelegateArgs,
    DelegateBackgroundArgs,
    DelegateContinuableArgs,
    describe_tool,
    run_foreground,
)

__all__ = ["build_tool"]


def build_tool(
    runtime: SubagentRuntime, config: SubagentToolConfig, provider: SubagentProvider
) -> Tool:
    """The tool instance for ``config`` bound to ``provider``."""
    if config.enable_run_in_background:
        from dsh.tool_subagent._background import run_delegation

        async def run_with_background(args: DelegateArgs, tctx: ToolContext) -> ToolResult:
            return await run_delegation(runtime, config, args, tctx)

        arguments: type[DelegateArgs] = (
            DelegateContinuableArgs
            if config.background_mode == "continuable"
            else DelegateBackgroundArgs
        )
        return Tool.from_model(
            config.tool_name, describe_tool(config, provider), arguments, run_with_background
        )

    # (a partial, not a wrapping coroutine: one frame less on every delegation)
    run = partial(run_foreground, runtime, config)
    return Tool.from_model(config.tool_name, describe_tool(config, provider), DelegateArgs, run)
