"""dsh.subagent_spawn_in_process — the ``spawn`` subagent provider: a fresh in-process child.

Load it from a preset::

    [[plugin]]
    name = "dsh-subagent-spawn-in-process"
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import SubagentRuntime
from dsh.subagent_in_process_driver import InProcessProvider

__all__ = ["SpawnConfig", "plugin", "provider"]


class SpawnConfig(BaseModel):
    """Config of the ``spawn`` provider plugin."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("spawn", min_length=1)
    """The provider name tools and callers use."""


def provider(name: str = "spawn") -> InProcessProvider:
    """A ``spawn`` provider instance (for registering by hand)."""
    return InProcessProvider(name, fork=False)


def apply(ctx: Context, config: SpawnConfig, effects: EffectScope) -> None:
    """Register the provider with ``ctx.subagents``."""
    effects.add(SubagentRuntime.of(ctx).register_provider(provider(config.name)))


plugin = Plugin("dsh-subagent-spawn-in-process", apply, SpawnConfig)
