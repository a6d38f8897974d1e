"""dsh.core — the host harness the subagent seam stands on.

Context and plugins, sessions (JSONL), agents and the agent loop, the LLM runtime
with a scripted adapter, tools, jobs, the event bus and the abort signal.
"""

from dsh.core._agent import Agent, AgentObserver, StopReason, TurnOutcome, last_output
from dsh.core._agents import AgentRegistry
from dsh.core._content import Content, ContentBlock, as_blocks, text_block, text_of
from dsh.core._context import Context
from dsh.core._effects import AsyncDisposer, Disposer, EffectScope
from dsh.core._errors import ConfigError, DshError
from dsh.core._events import ANY, BusEvent, EventBus
from dsh.core._gc import tune_gc
from dsh.core._jobs import (
    MAX_RUNNING_PER_OWNER,
    Job,
    JobError,
    JobOutcome,
    JobRegistry,
    JobStatus,
    describe_job,
)
from dsh.core._llm import (
    BoundModel,
    LLMRuntime,
    ModelAdapter,
    ModelConfig,
    ModelConfigError,
    ModelDone,
    ModelError,
    ModelRequest,
    ModelStopReason,
    ModelStreamEvent,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
)
from dsh.core._permissions import (
    Approver,
    PermissionDecision,
    PermissionPolicy,
    PermissionRequest,
    Permissions,
    PermissionsConfig,
)
from dsh.core._plugins import LoadedPlugin, NoConfig, Plugin, PluginError, PluginHost
from dsh.core._presets import (
    AgentDefaults,
    PluginRow,
    Preset,
    PresetError,
    find_preset,
    load_named_preset,
    load_preset,
    named_presets,
    parse_preset,
)
from dsh.core._prompt import PromptSections
from dsh.core._scripted import (
    ScriptedAdapter,
    ScriptedModelOptions,
    ScriptedReply,
    ScriptedToolCall,
)
from dsh.core._session import (
    Event,
    LoadedSession,
    Session,
    SessionError,
    SessionHeader,
    SessionStore,
    TornTail,
    new_session_id,
)
from dsh.core._signals import Aborted, AbortSignal
from dsh.core._tools import (
    AgentTools,
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolResult,
    ToolView,
    TurnBlocked,
    tool,
)
from dsh.core._tracing import NO_TRACING, TracedCall, Tracing, install_tracing
from dsh.core._validation import validation_problems

__all__ = [
    "ANY",
    "MAX_RUNNING_PER_OWNER",
    "NO_TRACING",
    "AbortSignal",
    "Aborted",
    "Agent",
    "AgentDefaults",
    "AgentObserver",
    "AgentRegistry",
    "AgentTools",
    "Approver",
    "AsyncDisposer",
    "BoundModel",
    "BusEvent",
    "ConfigError",
    "Content",
    "ContentBlock",
    "Context",
    "Disposer",
    "DshError",
    "EffectScope",
    "Event",
    "EventBus",
    "Job",
    "JobError",
    "JobOutcome",
    "JobRegistry",
    "JobStatus",
    "LLMRuntime",
    "LoadedPlugin",
    "LoadedSession",
    "ModelAdapter",
    "ModelConfig",
    "ModelConfigError",
    "ModelDone",
    "ModelError",
    "ModelRequest",
    "ModelStopReason",
    "ModelStreamEvent",
    "NoConfig",
    "PermissionDecision",
    "PermissionPolicy",
    "PermissionRequest",
    "Permissions",
    "PermissionsConfig",
    "Plugin",
    "PluginError",
    "PluginHost",
    "PluginRow",
    "Preset",
    "PresetError",
    "PromptSections",
    "ScriptedAdapter",
    "ScriptedModelOptions",
    "ScriptedReply",
    "ScriptedToolCall",
    "Session",
    "SessionError",
    "SessionHeader",
    "SessionStore",
    "StopReason",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolView",
    "TornTail",
    "TracedCall",
    "Tracing",
    "TurnBlocked",
    "TurnOutcome",
    "Usage",
    "as_blocks",
    "describe_job",
    "find_preset",
    "install_tracing",
    "last_output",
    "load_named_preset",
    "load_preset",
    "named_presets",
    "new_session_id",
    "parse_preset",
    "text_block",
    "text_of",
    "tool",
    "tune_gc",
    "validation_problems",
]
