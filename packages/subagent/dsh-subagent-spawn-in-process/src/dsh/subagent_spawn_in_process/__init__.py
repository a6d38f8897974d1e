"""dsh.subagent_spawn_in_process — the ``spawn`` subagent provider: a fresh in-process child.

The child has its own session and sees only the delegated prompt. Load it from a preset::

    [[plugin]]
    name = "dsh-subagent-spawn-in-process"      # config = { name = "spawn" }
"""

from __future__ import annotations

from dsh.subagent_in_process_driver import (
    InProcessProvider,
    InProcessProviderConfig,
    provider_plugin,
)

__all__ = ["InProcessProviderConfig", "plugin", "provider"]


def provider(name: str = "spawn") -> InProcessProvider:
    """A ``spawn`` provider instance (for registering by hand)."""
    return InProcessProvider(name, fork=False)


plugin = provider_plugin("dsh-subagent-spawn-in-process", "spawn", fork=False)
