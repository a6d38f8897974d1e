"""dsh.subagent — the interface third of the subagent seam.

A named-provider registry (``ctx.subagents``, a :class:`SubagentRuntime`) that
every transport registers with, and the one vocabulary every transport speaks:
:class:`SubagentStartRequest` in, a :class:`SubagentRun` out, an awaitable
:class:`SubagentResult`, live :class:`SubagentProgress`, ``dispose()``::

    request = SubagentStartRequest("Summarise README.md", parent, signal)
    run = await ctx.subagents.start("spawn", request)
    async with run:
        async for item in run.progress():
            ...
        result = await run.result

Continuable children (answer more than once; ``ctx.subagents.continuable``)::

    child = await ctx.subagents.start_continuable("spawn", request)
    await ctx.subagents.continuable.send_message(parent, child.id, "Now check the docs job too")

Provider authors: :class:`RunHandle` (settle a run, report progress) is here;
:mod:`dsh.subagent.kit` has the out-of-process skeleton (:class:`~dsh.subagent.kit.RemoteRun`).
"""

from dsh.subagent._continuable import ContinuableChildren
from dsh.subagent._continuable_record import ContinuableChild, ContinuableStatus
from dsh.subagent._continuable_turns import NOTICE_REPORT, NOTICE_SETTLED
from dsh.subagent._errors import (
    CapacityExceeded,
    ContinuationError,
    ContinuationUnavailable,
    DepthExceeded,
    Draining,
    DuplicateChild,
    DuplicateProvider,
    InvalidRequest,
    NotResumable,
    ProviderNotFound,
    StartAborted,
    StartFailed,
    SubagentError,
    SubagentErrorCode,
    Unauthorized,
    UnsupportedCapability,
)
from dsh.subagent._installed import InstalledProvider, installed_providers
from dsh.subagent._meter import BudgetMeter
from dsh.subagent._plugin import SubagentConfig
from dsh.subagent._progress import ProgressKind, SubagentProgress, SubagentUsage, UsageReport
from dsh.subagent._provider import ContinuableProvider, SubagentProvider, supports_continuable
from dsh.subagent._run import ProgressStream, RunHandle, SubagentRun
from dsh.subagent._runtime import SubagentRuntime
from dsh.subagent._types import (
    ALL_START_CAPABILITIES,
    NO_START_CAPABILITIES,
    Budget,
    SubagentCapabilities,
    SubagentResult,
    SubagentStartRequest,
    SubagentStopReason,
    ToolFilter,
)

__all__ = [
    "ALL_START_CAPABILITIES",
    "NOTICE_REPORT",
    "NOTICE_SETTLED",
    "NO_START_CAPABILITIES",
    "Budget",
    "BudgetMeter",
    "CapacityExceeded",
    "ContinuableChild",
    "ContinuableChildren",
    "ContinuableProvider",
    "ContinuableStatus",
    "ContinuationError",
    "ContinuationUnavailable",
    "DepthExceeded",
    "Draining",
    "DuplicateChild",
    "DuplicateProvider",
    "InstalledProvider",
    "InvalidRequest",
    "NotResumable",
    "ProgressKind",
    "ProgressStream",
    "ProviderNotFound",
    "RunHandle",
    "StartAborted",
    "StartFailed",
    "SubagentCapabilities",
    "SubagentConfig",
    "SubagentError",
    "SubagentErrorCode",
    "SubagentProgress",
    "SubagentProvider",
    "SubagentResult",
    "SubagentRun",
    "SubagentRuntime",
    "SubagentStartRequest",
    "SubagentStopReason",
    "SubagentUsage",
    "ToolFilter",
    "Unauthorized",
    "UnsupportedCapability",
    "UsageReport",
    "installed_providers",
    "supports_continuable",
]
