"""``AcpProvider``: a subagent that is another agent process spoken to over ACP."""

from __future__ import annotations

from dsh.subagent import (
    NO_START_CAPABILITIES,
    SubagentCapabilities,
    SubagentRun,
    SubagentStartRequest,
)
from dsh.subagent_acp._config import AcpProviderConfig
from dsh.subagent_acp._run import AcpRun

__all__ = ["AcpProvider"]

_DEPTH_ONLY = SubagentCapabilities(depth_limit=True)


class AcpProvider:
    """Runs each child as a configured ACP agent process.

    ``start`` spawns the command in its own process group with a credential-scrubbed
    environment, opens an ACP session (cwd: config, else the parent session's),
    publishes the run and sends the prompt; a cancel sends ``session/cancel``;
    ``dispose`` tears the process tree down. A start that fails or is aborted
    raises and leaves no process behind. With ``depth_limit = true`` (an agent that
    honours dsh's depth limit, such as ``dsh acp``) it has the ``depth_limit``
    capability; it has no other start capability.
    """

    inherits_parent_context = False

    def __init__(self, config: AcpProviderConfig) -> None:
        self.config = config
        self.name = config.name
        self.capabilities: SubagentCapabilities = (
            _DEPTH_ONLY if config.depth_limit else NO_START_CAPABILITIES
        )

    def __repr__(self) -> str:
        return f"<AcpProvider {self.name}: {' '.join(self.config.argv)}>"

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Spawn the agent, open an ACP session, publish the run, send the prompt."""
        return await AcpRun(self.name, request, self.config).launch()
