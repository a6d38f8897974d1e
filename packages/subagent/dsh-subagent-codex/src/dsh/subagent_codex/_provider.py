"""``CodexProvider``, the subagent provider named ``codex``, and its plugin."""

from __future__ import annotations

from collections.abc import Mapping

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import SubagentCapabilities, SubagentRun, SubagentStartRequest
from dsh.subagent.kit import process_max_running
from dsh.subagent_codex._appserver import CodexAppServer, base_extra_env, start_pooled
from dsh.subagent_codex._config import CodexConfig
from dsh.subagent_codex._run import CodexRun
from dsh.subprocess import PooledProvider, Sandbox, Starting, provider_env

__all__ = ["CodexProvider", "plugin"]

_BUDGET_ONLY = SubagentCapabilities(budget=True)
"""A budget is enforced from this side (the run's ``budget_caps``); nothing else."""


class CodexProvider(PooledProvider[CodexAppServer]):
    """Runs each delegated task as a one-shot ``codex app-server`` child.

    One process per run: ``initialize``, an ephemeral thread in the child cwd
    (config ``cwd``, else the parent session's), one turn with the prompt, the
    last completed agent message as the output. One start capability, ``budget``
    (tokens and time, enforced from this side from the usage codex reports as it
    goes); codex manages its own depth, tools and persona.

    With ``pool.size`` > 0 each context keeps that many handshaken app-servers
    (:meth:`pool`); a run takes one, starts its own thread on it, and gives it back.

    The app-server runs in the delegating agent's sandbox (narrowed by the row's
    ``sandbox``; network kept, ``CODEX_HOME`` writable), and each thread's own codex
    sandbox is never wider than that policy (:meth:`CodexConfig.sandbox_settings`).
    """

    inherits_parent_context = False
    config: CodexConfig

    def __init__(self, config: CodexConfig | None = None) -> None:
        config = config or CodexConfig()
        super().__init__(config, config.pool, config.pool.concurrency)
        self.name = config.name
        self.capabilities = _BUDGET_ONLY
        self.max_running: int | None = process_max_running()
        """Default cap on running children: the cores (a preset's caps override it)."""

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start ``codex app-server`` (or take a warm one), handshake, and publish the run.

        Raises ``ABORTED`` if the request's signal fires first, ``INVALID_REQUEST``
        for a prompt without text or an unusable cwd, ``START_FAILED`` when the
        process cannot start or the handshake fails (or takes over
        ``start_timeout``); no process is left then.
        """
        pool = self.pool(request.parent.ctx)
        return await CodexRun(self.config, request, pool).launch()

    def pool_env(self, ctx: Context) -> dict[str, str]:
        """The row's environment and codex's own variables; no run's depth variables
        (each thread gets them) and no trace context."""
        return provider_env(self.config, base_extra_env(self.config))

    async def start_pooled(
        self, starting: Starting, *, env: Mapping[str, str], cwd: str, sandbox: Sandbox | None
    ) -> CodexAppServer:
        """Start one app-server for the pool and handshake."""
        return await start_pooled(starting, config=self.config, env=env, cwd=cwd, sandbox=sandbox)


def _apply(ctx: Context, config: CodexConfig, effects: EffectScope) -> None:
    """Register a codex provider named ``config.name`` (default ``codex``); with a pool,
    warm it up now (it closes with the context, or when the row is unloaded). A row
    ``sandbox`` wider than the preset's ``[sandbox]`` fails the load."""
    CodexProvider(config).register(ctx, effects)


plugin = Plugin("dsh-subagent-codex", _apply, CodexConfig)
