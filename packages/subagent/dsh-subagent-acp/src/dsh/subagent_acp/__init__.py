"""dsh.subagent_acp — the ``acp`` subagent provider.

Drives another agent process over the Agent Client Protocol on stdio: spawn it
in its own process group, ``initialize``, ``session/new``, prompt with text
blocks, fold its updates into the output and into progress items, answer its
permission requests by policy, cancel with ``session/cancel``, and tear the
process tree down on dispose::

    [[plugin]]
    name = "dsh-subagent-acp"
    config = { command = "dsh", args = ["acp", "--preset", "child.toml"], depth_limit = true }

    [[plugin]]
    name = "dsh-tool-subagent"
    config = { provider = "acp", tool_name = "subagent_acp", max_depth = 3 }

With ``workspace = "shared"`` the agent's ``fs/*`` and ``terminal/*`` requests are
served with the parent's own file and shell tools (see ``_workspace``).

The client side is a small strict JSON-RPC connection of its own: no ACP library
is imported, so the first start pays no import.
"""

from dsh.subagent_acp._config import AcpProviderConfig
from dsh.subagent_acp._plugin import plugin
from dsh.subagent_acp._provider import AcpProvider

__all__ = ["AcpProvider", "AcpProviderConfig", "plugin"]
