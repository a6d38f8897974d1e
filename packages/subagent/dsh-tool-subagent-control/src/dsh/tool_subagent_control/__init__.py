"""dsh.tool_subagent_control — tools to continue continuable subagents.

``send_message {agent_id, message}`` (the parent only), ``interrupt_agent
{agent_id}`` (a live ancestor, never the subagent itself) and ``list_agents
{scope}``. Load it beside a ``dsh-tool-subagent`` row with
``background_mode = "continuable"``::

    [[plugin]]
    name = "dsh-tool-subagent-control"
"""

from dsh.tool_subagent_control._plugin import ControlConfig, plugin
from dsh.tool_subagent_control._tools import (
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
