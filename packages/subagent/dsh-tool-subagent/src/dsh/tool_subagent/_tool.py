"""The ``subagent`` tool: what the parent model calls to delegate."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import ToolContext, ToolResult
from dsh.subagent import (
    SubagentError,
    SubagentProvider,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.tool_subagent._config import SubagentToolConfig
from dsh.tool_subagent._outcome import collect

__all__ = [
    "DelegateArgs",
    "DelegateBackgroundArgs",
    "DelegateContinuableArgs",
    "describe_tool",
    "run_foreground",
    "start_request",
]


class DelegateArgs(BaseModel):
    """What the model fills in."""

    model_config = ConfigDict(extra="forbid")

    description: str = Field(
        ..., min_length=1, max_length=200, description="A short (3-7 word) label for the task."
    )
    prompt: str = Field(..., min_length=1, description="The task for the subagent.")


class DelegateBackgroundArgs(DelegateArgs):
    """``DelegateArgs`` plus ``run_in_background``."""

    run_in_background: bool = Field(
        False,
        description="Start the subagent as a background job and return its job id at once.",
    )


class DelegateContinuableArgs(DelegateArgs):
    """``DelegateArgs`` plus ``run_in_background`` (continuable mode)."""

    run_in_background: bool = Field(
        False,
        description=(
            "Start the subagent in the background as a continuable agent and return its"
            " agent id at once; you can send it more messages later."
        ),
    )


FRESH = (
    "The subagent starts with no memory of this conversation: put everything it needs"
    " in the prompt (the goal, relevant facts and file paths, constraints, and what to"
    " report back)."
)
INHERITED = (
    "The subagent starts from a copy of this conversation's completed turns, so the"
    " prompt can refer to earlier context briefly; say exactly what to do and what to"
    " report back."
)


def describe_tool(config: SubagentToolConfig, provider: SubagentProvider) -> str:
    """The tool description the model reads, worded by ``inherits_parent_context``."""
    if config.description:
        return config.description
    lines = [
        "Delegate a self-contained task to a subagent and get its final answer back.",
        INHERITED if provider.inherits_parent_context else FRESH,
        "The subagent's intermediate steps are not shown to you; only its final"
        " answer (or why it failed) is returned.",
    ]
    if config.enable_run_in_background and config.background_mode == "continuable":
        lines.append(
            "Set run_in_background to keep working while it runs: you get a notice with"
            " its final output each time it finishes a turn, and it keeps its conversation"
            " so you can continue it with send_message."
        )
    elif config.enable_run_in_background:
        lines.append(
            "Set run_in_background to keep working while it runs; you get a notice when it"
            " finishes, or collect the result with job_output."
        )
    return " ".join(lines)


def start_request(
    config: SubagentToolConfig, args: DelegateArgs, tctx: ToolContext
) -> SubagentStartRequest:
    """The start request for one tool call, with the config's fixed fields."""
    # (positional, in the fields' order: on Python 3.11 a class called with keywords
    # builds a dict of them, once per delegation)
    return SubagentStartRequest(
        args.prompt,
        tctx.agent,
        tctx.signal,
        args.description,  # label
        config.agent_options,
        config.output_schema,
        config.numeric_max_depth,  # max_depth
        config.tool_filter.to_filter() if config.tool_filter else None,
        config.persona,
        config.budget.budget if config.budget is not None else None,
    )


async def run_foreground(
    runtime: SubagentRuntime, config: SubagentToolConfig, args: DelegateArgs, tctx: ToolContext
) -> ToolResult:
    """Start with the tool call's signal, await the result, dispose on every path."""
    try:
        run = await runtime.start(config.provider, start_request(config, args, tctx))
    except SubagentError as exc:
        return ToolResult(
            f"subagent could not start: {exc.message}", is_error=True, data={"code": exc.code}
        )
    return (await collect(run)).tool_result()
