"""The ``dsh-subagent-claude-code`` plugin: registers one provider per preset row."""

from __future__ import annotations

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import SubagentRuntime
from dsh.subagent_claude_code._config import ClaudeCodeConfig
from dsh.subagent_claude_code._provider import ClaudeCodeProvider

__all__ = ["plugin"]


def apply(ctx: Context, config: ClaudeCodeConfig, effects: EffectScope) -> None:
    """Register a ``claude-code`` provider (named ``config.name``) with ``ctx.subagents``.
    A row ``sandbox`` wider than the preset's ``[sandbox]`` fails the load."""
    config.sandbox_policy(ctx.sandbox, strict=True, what=f'the "{config.name}" provider')
    effects.add(SubagentRuntime.of(ctx).register_provider(ClaudeCodeProvider(config)))


plugin = Plugin("dsh-subagent-claude-code", apply, ClaudeCodeConfig)
