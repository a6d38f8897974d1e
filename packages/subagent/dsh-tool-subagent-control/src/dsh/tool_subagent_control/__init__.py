"""dsh.tool_subagent_control — tools to continue continuable subagents.

``send_message {agent_id, message}`` (the parent only), ``interrupt_agent
{agent_id}`` (a live ancestor, never the subagent itself) and ``list_agents
{scope}``. Load it beside a ``dsh-tool-subagent`` row with
``background_mode = "continuable"``::

    [[plugin]]
    name = "dsh-tool-subagent-control"
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import SubagentRuntime
from dsh.tool_subagent_control.tools import (
    InterruptArgs,
    ListAgentsArgs,
    SendMessageArgs,
    describe_child,
    interrupt_agent_tool,
    list_agents_tool,
    send_message_tool,
)

__all__ = [
    "ControlConfig",
    "InterruptArgs",
    "ListAgentsArgs",
    "SendMessageArgs",
    "describe_child",
    "interrupt_agent_tool",
    "list_agents_tool",
    "plugin",
    "send_message_tool",
]


class ControlConfig(BaseModel):
    """Config of ``dsh-tool-subagent-control`` (none yet)."""

    model_config = ConfigDict(extra="forbid")


def apply(ctx: Context, config: ControlConfig, effects: EffectScope) -> None:
    """Register ``send_message``, ``interrupt_agent`` and ``list_agents``."""
    SubagentRuntime.of(ctx)  # the registry the tools use lives for the context
    for tool in (send_message_tool, interrupt_agent_tool, list_agents_tool):
        effects.add(ctx.tools.register(tool))


plugin = Plugin("dsh-tool-subagent-control", apply, ControlConfig)
