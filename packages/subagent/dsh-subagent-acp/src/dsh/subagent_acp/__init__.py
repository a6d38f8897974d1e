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

Importing this package does not import ``acp`` (≈1.5 s): the first start does,
in a worker thread. Nor does it import the provider: its names load on first
use, so :mod:`dsh.subagent_acp.agent_side` (the agent side, used by ``dsh acp``)
starts without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh.subagent_acp.config import AcpProviderConfig
    from dsh.subagent_acp.plugin import plugin
    from dsh.subagent_acp.provider import STOP_REASONS, AcpProvider

__all__ = ["STOP_REASONS", "AcpProvider", "AcpProviderConfig", "plugin"]

_EXPORTS = {
    "AcpProviderConfig": "dsh.subagent_acp.config",
    "plugin": "dsh.subagent_acp.plugin",
    "STOP_REASONS": "dsh.subagent_acp.provider",
    "AcpProvider": "dsh.subagent_acp.provider",
}


def __getattr__(name: str) -> object:
    """Load the package's public names on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
