"""dsh.subagent — the interface third of the subagent seam.

A named-provider registry (``ctx.subagents``, a :class:`SubagentRuntime`) that
every transport registers with, and the one vocabulary every transport speaks:
:class:`SubagentStartRequest` in, a :class:`SubagentRun` out, an awaitable
:class:`SubagentResult`, ``dispose()``.

    runtime = SubagentRuntime.of(ctx)
    run = await runtime.start("spawn", SubagentStartRequest("Summarise README.md", parent, signal))
    async with run:
        result = await run.result
"""

from dsh.subagent.diagnostics import DIAGNOSTIC_LIMIT, TRUNCATION_SUFFIX, cap_diagnostic
from dsh.subagent.errors import SubagentError, SubagentErrorCode
from dsh.subagent.provider import SubagentProvider, supports_continuable
from dsh.subagent.run import ResultCell, SubagentRun
from dsh.subagent.runtime import (
    EVENT_END,
    EVENT_PROVIDER_ADDED,
    EVENT_PROVIDER_REMOVED,
    EVENT_START,
    SubagentRuntime,
)
from dsh.subagent.types import (
    ALL_START_CAPABILITIES,
    KNOWN_STOP_REASONS,
    NO_START_CAPABILITIES,
    SubagentCapabilities,
    SubagentResult,
    SubagentStartRequest,
    SubagentStopReason,
    ToolFilter,
)

__all__ = [
    "ALL_START_CAPABILITIES",
    "DIAGNOSTIC_LIMIT",
    "EVENT_END",
    "EVENT_PROVIDER_ADDED",
    "EVENT_PROVIDER_REMOVED",
    "EVENT_START",
    "KNOWN_STOP_REASONS",
    "NO_START_CAPABILITIES",
    "TRUNCATION_SUFFIX",
    "ResultCell",
    "SubagentCapabilities",
    "SubagentError",
    "SubagentErrorCode",
    "SubagentProvider",
    "SubagentResult",
    "SubagentRun",
    "SubagentRuntime",
    "SubagentStartRequest",
    "SubagentStopReason",
    "ToolFilter",
    "cap_diagnostic",
    "supports_continuable",
]
