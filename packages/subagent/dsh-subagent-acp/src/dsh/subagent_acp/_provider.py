"""``AcpProvider``: a subagent that is another agent process spoken to over ACP."""

from __future__ import annotations

import functools

from dsh.core import Context
from dsh.subagent import (
    NO_START_CAPABILITIES,
    SubagentCapabilities,
    SubagentRun,
    SubagentStartRequest,
)
from dsh.subagent.kit import process_max_running
from dsh.subagent_acp._agent import AcpAgentProcess, start_pooled
from dsh.subagent_acp._config import AcpProviderConfig
from dsh.subagent_acp._run import AcpRun
from dsh.subprocess import PoolsByContext, ProcessPool, provider_env, provider_sandbox

__all__ = ["AcpProvider"]


class AcpProvider:
    """Runs each child as a configured ACP agent process.

    ``start`` spawns the command in its own process group with a credential-scrubbed
    environment, opens an ACP session (cwd: config, else the parent session's),
    publishes the run and sends the prompt; a cancel sends ``session/cancel``;
    ``dispose`` tears the process tree down. A start that fails or is aborted
    raises and leaves no process behind. With ``depth_limit = true`` (an agent that
    honours dsh's depth limit, such as ``dsh acp``) it has the ``depth_limit``
    capability; with ``budget = true`` (an agent that enforces dsh's budget, such as
    ``dsh acp``) the ``budget`` capability; it has no other start capability.

    With ``pool.size`` > 0 each context keeps that many initialized agent processes
    (:meth:`pool`); a run takes one, opens its own session, and gives it back.

    The agent process runs in the delegating agent's sandbox (narrowed by the row's
    ``sandbox``), network kept; a dsh agent applies the policy, passed in
    ``DSH_SANDBOX``, to its own tools.
    """

    inherits_parent_context = False

    def __init__(self, config: AcpProviderConfig) -> None:
        self.config = config
        self.name = config.name
        self.capabilities: SubagentCapabilities = (
            SubagentCapabilities(depth_limit=config.depth_limit, budget=config.budget)
            if config.depth_limit or config.budget
            else NO_START_CAPABILITIES
        )
        self.max_running: int | None = process_max_running()
        """Default cap on running children: the cores (a preset's caps override it)."""
        self._pools: PoolsByContext[AcpAgentProcess] | None = (
            PoolsByContext(self._make_pool) if config.pool.enabled else None
        )

    def __repr__(self) -> str:
        return f"<AcpProvider {self.name}: {' '.join(self.config.argv)}>"

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Spawn the agent (or take a warm one), open an ACP session, publish the run,
        send the prompt."""
        pool = self.pool(request.parent.ctx)
        return await AcpRun(self.name, request, self.config, pool).launch()

    def pool(self, ctx: Context) -> ProcessPool[AcpAgentProcess] | None:
        """The context's warm pool (started on first use); None when pooling is off or
        the context is closing."""
        return self._pools.get(ctx) if self._pools is not None else None

    async def aclose(self) -> None:
        """Close the warm pools (processes a run holds close when it is done)."""
        if self._pools is not None:
            await self._pools.aclose()

    def _make_pool(self, ctx: Context) -> ProcessPool[AcpAgentProcess]:
        config = self.config
        # no run's depth variables (those go in _meta.dsh); OTEL_* while tracing is on
        env = provider_env(config, telemetry=ctx.tracing.enabled)
        cwd = config.cwd or ctx.cwd
        sandbox = provider_sandbox(config, ctx.sandbox, env)
        start = functools.partial(
            start_pooled, provider=self.name, config=config, env=env, cwd=cwd, sandbox=sandbox
        )
        return ProcessPool(
            start,
            config.pool,
            name=self.name,
            env=env,
            cwd=cwd,
            sandbox=sandbox,
            start_timeout=config.start_timeout,
            eof_grace=config.eof_grace,
            term_grace=config.term_grace,
        )
