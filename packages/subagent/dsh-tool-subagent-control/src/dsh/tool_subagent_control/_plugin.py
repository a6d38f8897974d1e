"""The ``dsh-tool-subagent-control`` plugin: registers ``send_message``,
``interrupt_agent`` and ``list_agents``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import SubagentRuntime
from dsh.tool_subagent_control._tools import (
    interrupt_agent_tool,
    list_agents_tool,
    send_message_tool,
)

__all__ = ["ControlConfig", "plugin"]


class ControlConfig(BaseModel):
    """Config of ``dsh-tool-subagent-control`` (none yet)."""

    model_config = ConfigDict(extra="forbid")


def apply(ctx: Context, config: ControlConfig, effects: EffectScope) -> None:
    """Register ``send_message``, ``interrupt_agent`` and ``list_agents``."""
    SubagentRuntime.of(ctx)  # the registry the tools use lives for the context
    for tool in (send_message_tool, interrupt_agent_tool, list_agents_tool):
        effects.add(ctx.tools.register(tool))


plugin = Plugin("dsh-tool-subagent-control", apply, ControlConfig)
"""The ``dsh-tool-subagent-control`` plugin (entry point in the ``dsh.plugins`` group)."""
