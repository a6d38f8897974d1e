"""``send_message``, ``interrupt_agent`` and ``list_agents`` over the continuable registry.

Refusals come back as error results carrying the ``SubagentError`` code in
their data (``UNAUTHORIZED``, ``NOT_RESUMABLE``, ``DRAINING``,
``CONTINUATION_UNAVAILABLE``, ``DUPLICATE_CHILD``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import Tool, ToolContext, ToolResult
from dsh.subagent import ContinuableChild, SubagentError, SubagentRuntime

__all__ = [
    "InterruptArgs",
    "ListAgentsArgs",
    "SendMessageArgs",
    "describe_child",
    "interrupt_agent_tool",
    "list_agents_tool",
    "send_message_tool",
]


class SendMessageArgs(BaseModel):
    """Arguments of ``send_message``."""

    model_config = ConfigDict(extra="forbid")

    agent_id: str = Field(..., min_length=1, description="The subagent's id.")
    message: str = Field(..., min_length=1, description="What to tell or ask it.")


class InterruptArgs(BaseModel):
    """Arguments of ``interrupt_agent``."""

    model_config = ConfigDict(extra="forbid")

    agent_id: str = Field(..., min_length=1, description="The subagent's id.")


class ListAgentsArgs(BaseModel):
    """Arguments of ``list_agents``."""

    model_config = ConfigDict(extra="forbid")

    scope: Literal["children", "descendants"] = Field(
        "children",
        description="children: the subagents you started; descendants: theirs too.",
    )


def _refused(action: str, exc: SubagentError) -> ToolResult:
    return ToolResult(f"{action} refused: {exc.message}", is_error=True, data={"code": exc.code})


def describe_child(child: ContinuableChild, *, head: int = 300) -> str:
    """One entry of ``list_agents``: id, label, status, last output head, diagnostic."""
    line = f"- {child.id}"
    if child.label:
        line += f' "{child.label}"'
    line += f" ({child.provider}, depth {child.depth}): {child.status}"
    if child.turns:
        line += f", {child.turns} turn{'s' if child.turns != 1 else ''} finished"
    if child.queued:
        line += f", {child.queued} message{'s' if child.queued != 1 else ''} queued"
    lines = [line]
    if child.diagnostic:
        lines.append(f"  diagnostic: {child.diagnostic}")
    if child.last_output:
        output = child.last_output
        if len(output) > head:
            output = output[:head] + "…"
        lines.append("  last output: " + output.replace("\n", "\n  "))
    return "\n".join(lines)


async def send_message(args: SendMessageArgs, tctx: ToolContext) -> ToolResult:
    """Deliver a message to one of the caller's continuable subagents."""
    continuable = SubagentRuntime.of(tctx.agent.ctx).continuable
    try:
        child, how = await continuable.send_message(
            tctx.agent, args.agent_id, args.message, signal=tctx.signal
        )
    except SubagentError as exc:
        return _refused("send_message", exc)
    if how == "queued":
        text = (
            f"Queued for subagent {child.id}: it is running and reads the message after its"
            " current turn."
        )
    elif how == "resumed":
        text = (
            f"Subagent {child.id} had no live activation; it was resumed from its saved"
            " session and is working on the message."
        )
    else:
        text = f"Subagent {child.id} is working on the message."
    return ToolResult(
        text + " You get a notice when it finishes its turn.",
        data={"agent_id": child.id, "delivery": how, "status": child.status},
    )


async def interrupt_agent(args: InterruptArgs, tctx: ToolContext) -> ToolResult:
    """Stop the running turn of a descendant subagent; its queued messages are kept."""
    continuable = SubagentRuntime.of(tctx.agent.ctx).continuable
    try:
        child, was_running = await continuable.interrupt(
            tctx.agent, args.agent_id, signal=tctx.signal
        )
    except SubagentError as exc:
        return _refused("interrupt_agent", exc)
    if not was_running:
        return ToolResult(
            f"Subagent {child.id} was not running (status {child.status}); nothing to interrupt.",
            data={"agent_id": child.id, "interrupted": False, "status": child.status},
        )
    kept = f" {child.queued} queued message(s) are kept." if child.queued else ""
    return ToolResult(
        f"Interrupted subagent {child.id}; its turn stopped.{kept} Continue it with send_message.",
        data={"agent_id": child.id, "interrupted": True, "status": child.status},
    )


async def list_agents(args: ListAgentsArgs, tctx: ToolContext) -> ToolResult:
    """The caller's continuable subagents (or all its descendants) with their status."""
    continuable = SubagentRuntime.of(tctx.agent.ctx).continuable
    children = continuable.list(tctx.agent, args.scope)
    data = {"agents": [c.summary() for c in children]}
    if not children:
        return ToolResult("You have no continuable subagents.", data=data)
    return ToolResult("\n".join(describe_child(c) for c in children), data=data)


send_message_tool = Tool.from_model(
    "send_message",
    "Send a message to one of your continuable subagents: it is queued if the subagent is"
    " busy, wakes it if it waits, and resumes it from its saved session if needed. You get"
    " a notice with its final output when it finishes its turn.",
    SendMessageArgs,
    send_message,
)
interrupt_agent_tool = Tool.from_model(
    "interrupt_agent",
    "Stop the current turn of a subagent you started (or one of its descendants). Messages"
    " queued for it are kept; continue it later with send_message.",
    InterruptArgs,
    interrupt_agent,
)
list_agents_tool = Tool.from_model(
    "list_agents",
    "List your continuable subagents with their status and the head of their last output.",
    ListAgentsArgs,
    list_agents,
)
