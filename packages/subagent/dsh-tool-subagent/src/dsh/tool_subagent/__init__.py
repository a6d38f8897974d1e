"""dsh.tool_subagent — the consumer third of the subagent seam.

A model-facing tool (default name ``subagent``) bound by config to one provider.
The model sees only ``description`` and ``prompt``; the provider, depth limit,
persona and tool filter are fixed by the preset::

    [[plugin]]
    name = "dsh-tool-subagent"
    config = { provider = "spawn", tool_name = "subagent", max_depth = 3 }
"""

from dsh.tool_subagent.background import (
    JOB_KIND,
    job_outcome_for,
    run_delegation,
    start_background_job,
    start_continuable_child,
)
from dsh.tool_subagent.config import SubagentToolConfig, ToolFilterConfig
from dsh.tool_subagent.outcome import HEADLINES, headline_for, tool_result_for
from dsh.tool_subagent.plugin import SubagentToolError, check_compatible, plugin
from dsh.tool_subagent.tool import (
    DelegateArgs,
    DelegateBackgroundArgs,
    DelegateContinuableArgs,
    build_tool,
    describe_tool,
    run_foreground,
)

__all__ = [
    "HEADLINES",
    "JOB_KIND",
    "DelegateArgs",
    "DelegateBackgroundArgs",
    "DelegateContinuableArgs",
    "SubagentToolConfig",
    "SubagentToolError",
    "ToolFilterConfig",
    "build_tool",
    "check_compatible",
    "describe_tool",
    "headline_for",
    "job_outcome_for",
    "plugin",
    "run_delegation",
    "run_foreground",
    "start_background_job",
    "start_continuable_child",
    "tool_result_for",
]
