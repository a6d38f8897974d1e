"""dsh.tool_subagent — the consumer third of the subagent seam.

A model-facing tool (default name ``subagent``) bound by config to one provider.
The model sees only ``description`` and ``prompt`` (and ``run_in_background``
where enabled); the provider, depth limit, persona and tool filter are fixed by
the preset::

    [[plugin]]
    name = "dsh-tool-subagent"
    config = { provider = "spawn", tool_name = "subagent", max_depth = 3 }

A row whose provider is not registered once the preset has loaded, or cannot
honour the row's settings, fails the load with a message naming the row, the
provider and the fix, whatever the order of the rows.
"""

from dsh.tool_subagent._config import BudgetConfig, SubagentToolConfig, ToolFilterConfig
from dsh.tool_subagent._plugin import SubagentToolError, plugin

__all__ = ["BudgetConfig", "SubagentToolConfig", "SubagentToolError", "ToolFilterConfig", "plugin"]
