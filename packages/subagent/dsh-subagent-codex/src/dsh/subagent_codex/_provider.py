"""``CodexProvider``, the subagent provider named ``codex``, and its plugin."""

from __future__ import annotations

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import (
    NO_START_CAPABILITIES,
    SubagentCapabilities,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subagent_codex._config import CodexConfig
from dsh.subagent_codex._run import CodexRun

__all__ = ["CodexProvider", "plugin"]


class CodexProvider:
    """Runs each delegated task as a one-shot ``codex app-server`` child.

    One process per run: ``initialize``, an ephemeral thread in the child cwd
    (config ``cwd``, else the parent session's), one turn with the prompt, the
    last completed agent message as the output. No start capabilities: codex
    manages its own depth, tools and persona.
    """

    inherits_parent_context = False

    def __init__(self, config: CodexConfig | None = None) -> None:
        self.config = config or CodexConfig()
        self.name = self.config.name
        self.capabilities: SubagentCapabilities = NO_START_CAPABILITIES

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start ``codex app-server``, handshake, and publish the run.

        Raises ``ABORTED`` if the request's signal fires first, ``INVALID_REQUEST``
        for a prompt without text or an unusable cwd, ``START_FAILED`` when the
        process cannot start or the handshake fails (or takes over
        ``start_timeout``); no process is left then.
        """
        return await CodexRun(self.config, request).launch()


def _apply(ctx: Context, config: CodexConfig, effects: EffectScope) -> None:
    """Register a codex provider named ``config.name`` (default ``codex``)."""
    effects.add(SubagentRuntime.of(ctx).register_provider(CodexProvider(config)))


plugin = Plugin("dsh-subagent-codex", _apply, CodexConfig)
