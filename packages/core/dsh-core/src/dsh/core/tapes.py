"""Tool calls on a run's tape: the client of a tape proxy's tool route
(``ctx.tool_tape``), the variable that names the proxy, and how a tool call names its
agent (see :mod:`dsh.core._tool_tape`; the proxy is dsh-tape's ``TapeProxy``)."""

from dsh.core._tool_tape import (
    RECORDER_GROUP,
    TAPE_PROXY_VARIABLE,
    TOOL_ROUTE,
    ToolRoute,
    ToolTape,
    tool_key,
)

__all__ = [
    "RECORDER_GROUP",
    "TAPE_PROXY_VARIABLE",
    "TOOL_ROUTE",
    "ToolRoute",
    "ToolTape",
    "tool_key",
]
