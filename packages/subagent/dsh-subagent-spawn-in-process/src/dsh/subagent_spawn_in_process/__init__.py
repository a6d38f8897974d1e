"""dsh.subagent_spawn_in_process — the ``spawn`` subagent provider: a fresh in-process child.

The child has its own session and sees only the delegated prompt. Load it from a preset::

    [[plugin]]
    name = "dsh-subagent-spawn-in-process"      # config = { name = "spawn" }
"""

from __future__ import annotations

from dsh.subagent_in_process_driver import (
    InProcessProviderConfig,
    provider_factory,
    provider_plugin,
)

__all__ = ["InProcessProviderConfig", "plugin", "provider"]

provider = provider_factory("spawn", fork=False)
"""``provider(name="spawn")``: a ``spawn`` provider instance (for registering by hand)."""

plugin = provider_plugin("dsh-subagent-spawn-in-process", "spawn", fork=False)
"""The ``dsh.plugins`` entry point: registers the ``spawn`` provider (config ``name``)."""
