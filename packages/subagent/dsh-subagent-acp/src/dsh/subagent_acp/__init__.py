"""dsh.subagent_acp — the ``acp`` subagent provider.

Drives another agent process over the Agent Client Protocol on stdio: spawn it
in its own process group, ``initialize``, ``session/new``, prompt with text
blocks, fold its ``agent_message_chunk`` text into the result, answer its
permission requests by policy, cancel with ``session/cancel``, and tear the
process group down on dispose::

    [[plugin]]
    name = "dsh-subagent-acp"
    config = { command = "dsh", args = ["acp", "--preset", "child.toml"] }

    [[plugin]]
    name = "dsh-tool-subagent"
    config = { provider = "acp", tool_name = "subagent_acp", max_depth = "provider-managed" }

Importing this package does not import ``acp`` (≈1.5 s); the first start does,
in a worker thread.
"""

from dsh.subagent_acp.config import AcpProviderConfig
from dsh.subagent_acp.plugin import plugin
from dsh.subagent_acp.provider import STOP_REASONS, AcpProvider

__all__ = ["STOP_REASONS", "AcpProvider", "AcpProviderConfig", "plugin"]
