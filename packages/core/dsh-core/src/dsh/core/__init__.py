"""dsh.core — the host harness the subagent seam stands on.

Context and plugins, sessions (JSONL), agents and the agent loop, the LLM runtime
with a scripted adapter, tools, jobs, the event bus and the abort signal.

This module exports the names most code needs first. Every other public name has one
home in a topic module: :mod:`dsh.core.agents`, :mod:`dsh.core.models`,
:mod:`dsh.core.plugins`, :mod:`dsh.core.permissions`, :mod:`dsh.core.sessions`,
:mod:`dsh.core.jobs`, :mod:`dsh.core.tracing` and :mod:`dsh.core.lifecycle`. No name
is exported twice. Importing a topic module's name from ``dsh.core`` still works but
warns (:class:`DeprecationWarning`) with the import to use instead.
"""

from typing import TYPE_CHECKING

from dsh.core._agent import StopReason, TurnOutcome, last_output
from dsh.core._content import Content, text_of
from dsh.core._context import (
    Agent,
    Approver,
    Context,
    PermissionRequest,
    Permissions,
    ToolContext,
)
from dsh.core._effects import EffectScope
from dsh.core._env_model import model_from_env
from dsh.core._errors import ConfigError, DshError
from dsh.core._events import BusEvent, EventBus
from dsh.core._llm import ModelAdapter, ModelRequest, Usage
from dsh.core._permission_config import PermissionDecision
from dsh.core._plugins import Plugin, PluginHost
from dsh.core._presets import Preset, PresetError, load_named_preset, load_preset, parse_preset
from dsh.core._scripted import ScriptedAdapter, ScriptedReply, ScriptedToolCall
from dsh.core._session import Session, SessionStore
from dsh.core._signals import Aborted, AbortSignal
from dsh.core._tools import Tool, ToolError, ToolResult, tool
from dsh.core._trust import find_preset

__all__ = [
    "AbortSignal",
    "Aborted",
    "Agent",
    "Approver",
    "BusEvent",
    "ConfigError",
    "Content",
    "Context",
    "DshError",
    "EffectScope",
    "EventBus",
    "ModelAdapter",
    "ModelRequest",
    "PermissionDecision",
    "PermissionRequest",
    "Permissions",
    "Plugin",
    "PluginHost",
    "Preset",
    "PresetError",
    "ScriptedAdapter",
    "ScriptedReply",
    "ScriptedToolCall",
    "Session",
    "SessionStore",
    "StopReason",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "TurnOutcome",
    "Usage",
    "find_preset",
    "last_output",
    "load_named_preset",
    "load_preset",
    "model_from_env",
    "parse_preset",
    "text_of",
    "tool",
]

_TOPICS = (
    "agents",
    "jobs",
    "lifecycle",
    "models",
    "permissions",
    "plugins",
    "sessions",
    "tracing",
)
"""The public topic modules under ``dsh.core``, each with its own ``__all__``."""


def __dir__() -> list[str]:
    """Only the front-door names (the topic modules hold the rest)."""
    return list(__all__)


if not TYPE_CHECKING:  # type checkers see no fallback: a moved name is an error there

    def __getattr__(name: str) -> object:
        """A name that moved to a topic module, with a :class:`DeprecationWarning` that
        names the import to use instead; :class:`AttributeError` for any other name."""
        if not name.startswith("__"):
            import importlib
            import warnings

            for topic in _TOPICS:
                module = importlib.import_module(f"{__name__}.{topic}")
                if name in module.__all__:
                    warnings.warn(
                        f"dsh.core.{name} moved to dsh.core.{topic}: "
                        f"use `from dsh.core.{topic} import {name}`",
                        DeprecationWarning,
                        stacklevel=2,
                    )
                    return getattr(module, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
