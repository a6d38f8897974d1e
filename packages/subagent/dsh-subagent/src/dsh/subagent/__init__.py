"""dsh.subagent — the interface third of the subagent seam.

A named-provider registry (``ctx.subagents``, a :class:`SubagentRuntime`) that
every transport registers with, and the one vocabulary every transport speaks:
:class:`SubagentStartRequest` in, a :class:`SubagentRun` out, an awaitable
:class:`SubagentResult`, ``dispose()``.

    runtime = SubagentRuntime.of(ctx)
    run = await runtime.start("spawn", SubagentStartRequest("Summarise README.md", parent, signal))
    async with run:
        result = await run.result

Continuable children (answer more than once; ``runtime.continuable``)::

    request = SubagentStartRequest("Watch CI", parent, signal)
    child = await runtime.start_continuable("spawn", request)
    await runtime.continuable.send_message(parent, child.id, "Now check the docs job too")
"""

from dsh.subagent.continuable import (
    EVENT_CONTINUABLE_SETTLE,
    EVENT_CONTINUABLE_START,
    NOTICE_REPORT,
    NOTICE_SETTLED,
    ContinuableChildren,
    Delivery,
    ListScope,
    settlement_text,
)
from dsh.subagent.continuable_record import (
    CHILD_EVENT,
    SPEC_EVENT,
    ContinuableChild,
    ContinuableStatus,
)
from dsh.subagent.diagnostics import DIAGNOSTIC_LIMIT, TRUNCATION_SUFFIX, cap_diagnostic
from dsh.subagent.errors import SubagentError, SubagentErrorCode
from dsh.subagent.provider import ContinuableProvider, SubagentProvider, supports_continuable
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
    "CHILD_EVENT",
    "DIAGNOSTIC_LIMIT",
    "EVENT_CONTINUABLE_SETTLE",
    "EVENT_CONTINUABLE_START",
    "EVENT_END",
    "EVENT_PROVIDER_ADDED",
    "EVENT_PROVIDER_REMOVED",
    "EVENT_START",
    "KNOWN_STOP_REASONS",
    "NOTICE_REPORT",
    "NOTICE_SETTLED",
    "NO_START_CAPABILITIES",
    "SPEC_EVENT",
    "TRUNCATION_SUFFIX",
    "ContinuableChild",
    "ContinuableChildren",
    "ContinuableProvider",
    "ContinuableStatus",
    "Delivery",
    "ListScope",
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
    "settlement_text",
    "supports_continuable",
]
