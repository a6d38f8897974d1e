"""One ACP agent process: its connection, its ``initialize``, and the run it serves.

A run either starts its own (the default) or takes one from the provider's warm
pool; either way the process is an :class:`AcpAgentProcess`, which routes the
agent's session updates and requests to the run using it (one at a time), and
answers those of nobody's session itself (permission: ``cancelled``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import anyio

from dsh.subagent import StartFailed
from dsh.subagent.kit import Stages
from dsh.subagent_acp._config import AcpProviderConfig
from dsh.subagent_acp._connection import AcpConnection, LinkError, RemoteError
from dsh.subprocess import ChildProcess, PooledProcess, Sandbox, Starting, start_pooled_process

__all__ = ["PROTOCOL_VERSION", "AcpAgentProcess", "AgentUser", "describe_failure", "start_pooled"]

PROTOCOL_VERSION = 1
_VERSION = "0.1.0"
_CANCELLED = {"outcome": {"outcome": "cancelled"}}


class AgentUser(Protocol):
    """What a process needs of the run it serves."""

    session_id: str | None

    def on_update(self, message: dict[str, Any]) -> None:
        """A notification from the agent, in wire order."""

    async def on_request(self, method: str, params: Any) -> Any:
        """A request from the agent about the run's session."""


class AcpAgentProcess(PooledProcess):
    """An agent process and its strict ACP connection (see the module docstring)."""

    def __init__(self, child: ChildProcess, config: AcpProviderConfig) -> None:
        super().__init__(child)
        self.config = config
        self.user: AgentUser | None = None
        """The run whose session the process serves now."""
        self.enforces_budget = False
        """The agent confirmed that it enforces dsh's budget
        (``agentCapabilities._meta.dsh.budget``)."""
        self.closes_sessions = False
        """The agent advertised ``session/close`` (``agentCapabilities.sessionCapabilities``)."""
        self.conn = AcpConnection(
            child,
            max_line_bytes=config.max_message_bytes,
            skip_garbage=config.stdout_garbage == "skip",
            on_notification=self._on_notification,
            on_request=self._on_request,
        )

    @property
    def healthy(self) -> bool:
        """Alive, and its connection intact (no protocol violation, stdout open)."""
        return self.alive and self.conn.violation is None and not self.conn.ended.done()

    async def initialize(self, meta: Mapping[str, Any], stages: Stages) -> None:
        """``initialize``: protocol version 1; with ``depth_limit`` the agent must confirm
        that it honours dsh's depth limit; with ``workspace = "shared"`` the client
        capabilities ``fs`` and ``terminal`` are offered."""
        stages.enter("initialize")
        shared = self.config.workspace == "shared"
        init = await self.conn.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": shared, "writeTextFile": shared},
                    "terminal": shared,
                    "session": {"notices": {}},
                },
                "clientInfo": {"name": "dsh-subagent-acp", "version": _VERSION},
                "_meta": dict(meta),
            },
        )
        if not isinstance(init, dict):
            raise LinkError(f"the agent answered initialize with {str(init)[:200]}", "protocol")
        version = init.get("protocolVersion")
        if version != PROTOCOL_VERSION:
            raise LinkError(
                f"the agent speaks ACP protocol version {version};"
                f" dsh-subagent-acp speaks version {PROTOCOL_VERSION}",
                "protocol",
            )
        capabilities = init.get("agentCapabilities")
        capabilities = capabilities if isinstance(capabilities, dict) else {}
        self.enforces_budget = _confirms(capabilities, "budget")
        if self.config.depth_limit and not _confirms(capabilities, "depthLimit"):
            raise StartFailed(
                f"{stages.provider} initialize failed: the provider is configured with"
                " depth_limit = true but the agent does not confirm that it honours dsh's"
                " depth limit (agentCapabilities._meta.dsh.depthLimit); use an agent that"
                " does (dsh acp) or set depth_limit = false"
            )
        session = capabilities.get("sessionCapabilities")
        self.closes_sessions = isinstance(session, dict) and isinstance(session.get("close"), dict)

    async def close_session(self, session_id: str, timeout: float) -> bool:
        """``session/close``; True if the agent confirmed within ``timeout`` s."""
        try:
            with anyio.fail_after(timeout):
                await self.conn.request("session/close", {"sessionId": session_id})
        except (LinkError, TimeoutError):
            return False
        return True

    def _on_notification(self, message: dict[str, Any]) -> None:
        user = self.user
        if user is not None:
            user.on_update(message)

    async def _on_request(self, method: str, params: Any) -> Any:
        user = self.user
        session = params.get("sessionId") if isinstance(params, dict) else None
        if user is not None and (session is None or session == user.session_id):
            return await user.on_request(method, params)
        if method == "session/request_permission":
            return _CANCELLED  # a session no run owns (any more): nobody may allow anything
        raise RemoteError(-32601, f"Method not found: {method}")

    async def aclose(self, *, eof_grace: float, term_grace: float) -> None:
        """Stop reading, then stop the process tree."""
        await self.conn.close()
        await super().aclose(eof_grace=eof_grace, term_grace=term_grace)


def describe_failure(stages: Stages, error: BaseException) -> str:
    """The diagnostic of a failure at the current stage (the link's own words)."""
    if isinstance(error, LinkError):
        return f"{stages.provider} {stages.current} failed: {error.message}"
    return stages.describe(error)


async def start_pooled(
    starting: Starting,
    *,
    provider: str,
    config: AcpProviderConfig,
    env: Mapping[str, str],
    cwd: str,
    sandbox: Sandbox | None = None,
) -> AcpAgentProcess:
    """Start one agent process for the pool and ``initialize`` it.

    Its environment is the provider's (no run's depth variables: a pooled process
    serves runs of any depth, whose lineage goes in each session's ``_meta.dsh``),
    and it gets a run tag of its own; it runs in ``sandbox`` (the pool's). A failure raises
    :class:`~dsh.subagent.StartFailed` naming the stage, with the agent's stderr tail;
    the process is stopped first.
    """
    stages = Stages(provider)
    return await start_pooled_process(
        starting,
        config.argv,
        provider=provider,
        what=f"{provider} agent",
        env=env,
        cwd=cwd,
        sandbox=sandbox,
        connect=lambda child: AcpAgentProcess(child, config),
        handshake=lambda process: process.initialize({"dsh": {}}, stages),
        describe=lambda _process, error: describe_failure(stages, error),
        term_grace=config.term_grace,
    )


def _confirms(capabilities: dict[str, Any], key: str) -> bool:
    """The agent confirmed ``agentCapabilities._meta.dsh.<key>``."""
    meta = capabilities.get("_meta")
    dsh = meta.get("dsh") if isinstance(meta, dict) else None
    return isinstance(dsh, dict) and dsh.get(key) is True
