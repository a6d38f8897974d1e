"""dsh.tool_subagent_report — ``report {message}``, for continuable subagents only.

A continuable subagent calls ``report`` to deliver something to its live direct
parent before its turn ends; the parent receives it as a notice (source type
``subagent/report``). The tool is scoped: only continuable subagents see it.
Load it from a preset::

    [[plugin]]
    name = "dsh-tool-subagent-report"
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import Context, EffectScope, Plugin, Tool, ToolContext, ToolResult
from dsh.subagent import SubagentError, SubagentRuntime

__all__ = ["ReportArgs", "ReportConfig", "plugin", "report_tool"]


class ReportArgs(BaseModel):
    """Arguments of ``report``."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(..., min_length=1, description="What to tell the agent that started you.")


async def report(args: ReportArgs, tctx: ToolContext) -> ToolResult:
    """Deliver ``message`` to the caller's live direct parent, as a notice."""
    continuable = SubagentRuntime.of(tctx.agent.ctx).continuable
    try:
        parent = continuable.report(tctx.agent, args.message)
    except SubagentError as exc:
        return ToolResult(
            f"report not delivered: {exc.message}", is_error=True, data={"code": exc.code}
        )
    return ToolResult(
        f"Report delivered to your parent agent {parent.id}.", data={"parent_id": parent.id}
    )


report_tool = Tool.from_model(
    "report",
    "Send a progress report or an intermediate result to the agent that started you,"
    " without ending your turn. Your final answer still reaches it when you finish.",
    ReportArgs,
    report,
)


class ReportConfig(BaseModel):
    """Config of ``dsh-tool-subagent-report`` (none yet)."""

    model_config = ConfigDict(extra="forbid")


def apply(ctx: Context, config: ReportConfig, effects: EffectScope) -> None:
    """Give every continuable subagent of this context the ``report`` tool."""
    effects.add(SubagentRuntime.of(ctx).continuable.add_child_tool(report_tool))


plugin = Plugin("dsh-tool-subagent-report", apply, ReportConfig)
