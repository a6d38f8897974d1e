"""dsh.subagent_fork_in_process — the ``fork`` subagent provider.

An in-process child seeded with the parent's completed turns: its events through
the last ``turn/end``, shared, not copied. Load it from a preset::

    [[plugin]]
    name = "dsh-subagent-fork-in-process"      # config = { name = "fork" }
"""

from __future__ import annotations

from dsh.subagent_in_process_driver import (
    InProcessProviderConfig,
    provider_factory,
    provider_plugin,
)

__all__ = ["InProcessProviderConfig", "plugin", "provider"]

provider = provider_factory("fork", fork=True)
"""``provider(name="fork")``: a ``fork`` provider instance (for registering by hand)."""

plugin = provider_plugin("dsh-subagent-fork-in-process", "fork", fork=True)
"""The ``dsh.plugins`` entry point: registers the ``fork`` provider (config ``name``)."""
