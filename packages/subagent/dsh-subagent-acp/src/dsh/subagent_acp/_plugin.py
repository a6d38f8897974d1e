"""The ``dsh-subagent-acp`` plugin: registers one ``acp`` provider per preset row."""

from __future__ import annotations

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent_acp._config import AcpProviderConfig
from dsh.subagent_acp._provider import AcpProvider

__all__ = ["plugin"]


def apply(ctx: Context, config: AcpProviderConfig, effects: EffectScope) -> None:
    """Register an ACP provider named ``config.name`` (``acp`` by default); with a pool,
    warm it up now (it closes with the context, or when the row is unloaded). A row
    ``sandbox`` wider than the preset's ``[sandbox]`` fails the load."""
    AcpProvider(config).register(ctx, effects)


plugin = Plugin("dsh-subagent-acp", apply, AcpProviderConfig)
