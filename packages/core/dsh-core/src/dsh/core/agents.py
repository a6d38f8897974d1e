"""Agents beyond the front door: the registry (``ctx.agents``), turn observers, the
tool registry and per-agent tool views, a blocked turn, prompt sections,
:data:`CutOffTurn` (what ``ctx.agents.resume`` does with a turn its process stopped in), and
:data:`ANY`, the event type that subscribes to every event on ``ctx.events``.

:mod:`dsh.core` itself exports ``Agent``, ``Tool``, ``tool``, ``ToolContext``,
``ToolResult``, ``ToolError``, ``TurnOutcome``, ``StopReason``, ``last_output``,
``EventBus`` and ``BusEvent``.
"""

from dsh.core._agent import AgentObserver
from dsh.core._context import AgentRegistry
from dsh.core._cut_off import CutOffTurn
from dsh.core._events import ANY
from dsh.core._prompt import PromptSections
from dsh.core._tools import AgentTools, ToolRegistry, ToolView, TurnBlocked

__all__ = [
    "ANY",
    "AgentObserver",
    "AgentRegistry",
    "AgentTools",
    "CutOffTurn",
    "PromptSections",
    "ToolRegistry",
    "ToolView",
    "TurnBlocked",
]
