"""The ``dsh-subagent-temporal`` plugin: registers one ``temporal`` provider per preset row."""

from __future__ import annotations

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import SubagentRuntime
from dsh.subagent_temporal._config import TemporalProviderConfig
from dsh.subagent_temporal._provider import TemporalProvider

__all__ = ["plugin"]


def apply(ctx: Context, config: TemporalProviderConfig, effects: EffectScope) -> None:
    """Register a Temporal provider named ``config.name`` (``temporal`` by default)."""
    effects.add(SubagentRuntime.of(ctx).register_provider(TemporalProvider(config)))


plugin = Plugin("dsh-subagent-temporal", apply, TemporalProviderConfig)
