"""dsh.subagent_a2a — the ``a2a`` subagent provider.

Delegates to a remote agent over the Agent2Agent protocol (A2A) with the official
SDK (``a2a-sdk``): fetch and check the agent card, send the prompt as a message
(streaming where the card offers it, else send and poll the task), map status and
artifact updates to progress items, cancel with ``CancelTask``, settle from the
task's terminal state::

    [[plugin]]
    name = "dsh-subagent-a2a"
    config = { url = "http://127.0.0.1:8000/", depth_limit = true }

    [[plugin]]
    name = "dsh-tool-subagent"
    config = { provider = "a2a", tool_name = "subagent_remote", max_depth = 3 }

Any A2A agent works; a ``dsh a2a`` server (``dsh-a2a``) also relays its own nested
delegations as progress, reports tree-wide usage and honours the depth limit.
"""

from dsh.subagent_a2a._config import A2AProviderConfig
from dsh.subagent_a2a._plugin import plugin
from dsh.subagent_a2a._provider import A2AProvider

__all__ = ["A2AProvider", "A2AProviderConfig", "plugin"]
