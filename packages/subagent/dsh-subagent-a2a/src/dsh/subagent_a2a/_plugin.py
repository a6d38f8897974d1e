"""The ``dsh-subagent-a2a`` plugin: registers one ``a2a`` provider per preset row."""

from __future__ import annotations

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import SubagentRuntime
from dsh.subagent_a2a._config import A2AProviderConfig
from dsh.subagent_a2a._provider import A2AProvider

__all__ = ["plugin"]


def apply(ctx: Context, config: A2AProviderConfig, effects: EffectScope) -> None:
    """Register an A2A provider named ``config.name`` (``a2a`` by default)."""
    effects.add(SubagentRuntime.of(ctx).register_provider(A2AProvider(config)))


plugin = Plugin("dsh-subagent-a2a", apply, A2AProviderConfig)
