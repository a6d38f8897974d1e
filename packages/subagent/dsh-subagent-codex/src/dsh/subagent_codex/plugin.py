"""The ``dsh-subagent-codex`` plugin: registers one :class:`CodexProvider` per row."""

from __future__ import annotations

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import SubagentRuntime
from dsh.subagent_codex.config import CodexConfig
from dsh.subagent_codex.provider import CodexProvider

__all__ = ["plugin"]


def apply(ctx: Context, config: CodexConfig, effects: EffectScope) -> None:
    """Register a codex provider named ``config.name`` (default ``codex``)."""
    effects.add(SubagentRuntime.of(ctx).register_provider(CodexProvider(config)))


plugin = Plugin("dsh-subagent-codex", apply, CodexConfig)
