"""``CodexProvider``, the subagent provider named ``codex``, and its plugin."""

from __future__ import annotations

import functools

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent import (
    SubagentCapabilities,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subagent.kit import process_max_running
from dsh.subagent_codex._appserver import CodexAppServer, base_extra_env, start_pooled
from dsh.subagent_codex._config import CodexConfig
from dsh.subagent_codex._run import CodexRun
from dsh.subprocess import PoolsByContext, ProcessPool, provider_env, provider_sandbox

__all__ = ["CodexProvider", "plugin"]

_BUDGET_ONLY = SubagentCapabilities(budget=True)
"""A budget is enforced from this side (the run's ``budget_caps``); nothing else."""


class CodexProvider:
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

    def __init__(self, config: CodexConfig | None = None) -> None:
        self.config = config or CodexConfig()
        self.name = self.config.name
        self.capabilities: SubagentCapabilities = _BUDGET_ONLY
        self.max_running: int | None = process_max_running()
        """Default cap on running children: the cores (a preset's caps override it)."""
        self._pools: PoolsByContext[CodexAppServer] | None = (
            PoolsByContext(self._make_pool) if self.config.pool.enabled else None
        )

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start ``codex app-server`` (or take a warm one), handshake, and publish the run.

        Raises ``ABORTED`` if the request's signal fires first, ``INVALID_REQUEST``
        for a prompt without text or an unusable cwd, ``START_FAILED`` when the
        process cannot start or the handshake fails (or takes over
        ``start_timeout``); no process is left then.
        """
        pool = self.pool(request.parent.ctx)
        return await CodexRun(self.config, request, pool).launch()

    def pool(self, ctx: Context) -> ProcessPool[CodexAppServer] | None:
        """The context's warm pool (started on first use); None when pooling is off or
        the context is closing."""
        return self._pools.get(ctx) if self._pools is not None else None

    async def aclose(self) -> None:
        """Close the warm pools (app-servers a run holds close when it is done)."""
        if self._pools is not None:
            await self._pools.aclose()

    def _make_pool(self, ctx: Context) -> ProcessPool[CodexAppServer]:
        config = self.config
        # no run's depth variables (each thread gets them) and no trace context
        env = provider_env(config, base_extra_env(config))
        cwd = config.cwd or ctx.cwd
        sandbox = provider_sandbox(config, ctx.sandbox, env)
        return ProcessPool(
            functools.partial(start_pooled, config=config, env=env, cwd=cwd, sandbox=sandbox),
            config.pool,
            name=self.name,
            env=env,
            cwd=cwd,
            sandbox=sandbox,
            concurrency=config.pool.concurrency,
            start_timeout=config.start_timeout,
            eof_grace=config.eof_grace,
            term_grace=config.term_grace,
        )


def _apply(ctx: Context, config: CodexConfig, effects: EffectScope) -> None:
    """Register a codex provider named ``config.name`` (default ``codex``); with a pool,
    warm it up now (it closes with the context, or when the row is unloaded). A row
    ``sandbox`` wider than the preset's ``[sandbox]`` fails the load."""
    config.sandbox_policy(ctx.sandbox, strict=True, what=f'the "{config.name}" provider')
    provider = CodexProvider(config)
    effects.add(SubagentRuntime.of(ctx).register_provider(provider))
    effects.add(provider.aclose)
    provider.pool(ctx)


plugin = Plugin("dsh-subagent-codex", _apply, CodexConfig)
