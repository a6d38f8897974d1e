"""``AcpProvider``: a subagent that is another agent process spoken to over ACP."""

from __future__ import annotations

from collections.abc import Mapping

from dsh.core import Context
from dsh.subagent import (
    SubagentRun,
    SubagentStartRequest,
)
from dsh.subagent.kit import peer_capabilities, process_max_running
from dsh.subagent_acp._agent import AcpAgentProcess, start_pooled
from dsh.subagent_acp._config import AcpProviderConfig
from dsh.subagent_acp._run import AcpRun
from dsh.subprocess import PooledProvider, Sandbox, Starting, provider_env

__all__ = ["AcpProvider"]


class AcpProvider(PooledProvider[AcpAgentProcess]):
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
    config: AcpProviderConfig

    def __init__(self, config: AcpProviderConfig) -> None:
        super().__init__(config, config.pool)
        self.name = config.name
        self.capabilities = peer_capabilities(config.depth_limit, config.budget)
        self.max_running: int | None = process_max_running()
        """Default cap on running children: the cores (a preset's caps override it)."""

    def __repr__(self) -> str:
        return f"<AcpProvider {self.name}: {' '.join(self.config.argv)}>"

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Spawn the agent (or take a warm one), open an ACP session, publish the run,
        send the prompt."""
        pool = self.pool(request.parent.ctx)
        return await AcpRun(self.name, request, self.config, pool).launch()

    def pool_env(self, ctx: Context) -> dict[str, str]:
        """The row's environment; OTEL_* while tracing is on (a run's depth variables
        go in each session's ``_meta.dsh``)."""
        return provider_env(self.config, telemetry=ctx.tracing.enabled)

    async def start_pooled(
        self, starting: Starting, *, env: Mapping[str, str], cwd: str, sandbox: Sandbox | None
    ) -> AcpAgentProcess:
        """Start one agent process for the pool and ``initialize`` it."""
        return await start_pooled(
            starting, provider=self.name, config=self.config, env=env, cwd=cwd, sandbox=sandbox
        )
