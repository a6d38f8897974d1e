"""dsh.subagent_fork_in_process — the ``fork`` subagent provider.

An in-process child seeded with the parent's completed turns.

Load it from a preset::

    [[plugin]]
    name = "dsh-subagent-fork-in-process"
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import SubagentRuntime
from dsh.subagent_in_process_driver import InProcessProvider

__all__ = ["ForkConfig", "plugin", "provider"]


class ForkConfig(BaseModel):
    """Config of the ``fork`` provider plugin."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("fork", min_length=1)
    """The provider name tools and callers use."""


def provider(name: str = "fork") -> InProcessProvider:
    """A ``fork`` provider instance (for registering by hand)."""
    return InProcessProvider(name, fork=True)


def apply(ctx: Context, config: ForkConfig, effects: EffectScope) -> None:
    """Register the provider with ``ctx.subagents``."""
    effects.add(SubagentRuntime.of(ctx).register_provider(provider(config.name)))


plugin = Plugin("dsh-subagent-fork-in-process", apply, ForkConfig)
