"""``A2AProvider``: a subagent that is a remote agent spoken to over A2A."""

from __future__ import annotations

import importlib
from types import ModuleType

import anyio

from dsh.subagent import (
    StartAborted,
    SubagentCapabilities,
    SubagentRun,
    SubagentStartRequest,
)
from dsh.subagent.kit import peer_capabilities
from dsh.subagent_a2a._config import A2AProviderConfig

__all__ = ["A2AProvider"]

_RUN_MODULE = "dsh.subagent_a2a._run"
_loaded: ModuleType | None = None


async def _run_module() -> ModuleType:
    """The run's module, imported on the first start in a worker thread: it imports the
    A2A SDK (about half a second), which a preset that merely lists the provider should
    not pay for, and which must not stall the event loop."""
    global _loaded
    if _loaded is None:
        _loaded = await anyio.to_thread.run_sync(importlib.import_module, _RUN_MODULE)
    return _loaded


class A2AProvider:
    """Delegates each run to the configured A2A agent as one task.

    ``start`` fetches and checks the agent card (a start fails naming the URL when the
    card is unreachable, invalid, or lacks what the run needs), then publishes the run
    and sends the prompt as a message (streaming where the card offers it, else send
    and poll); a cancel sends ``CancelTask``. With ``depth_limit = true`` (an agent
    that honours dsh's depth limit, such as ``dsh a2a``) it has the ``depth_limit``
    capability; with ``budget = true`` (an agent that enforces dsh's budget, such as
    ``dsh a2a``) the ``budget``
    capability; it has no other start capability.
    """

    inherits_parent_context = False

    def __init__(self, config: A2AProviderConfig) -> None:
        self.config = config
        self.name = config.name
        self.capabilities: SubagentCapabilities = peer_capabilities(
            config.depth_limit, config.budget
        )

    def __repr__(self) -> str:
        return f"<A2AProvider {self.name}: {self.config.url}>"

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Fetch the card, publish the run, send the task."""
        module = await _run_module()
        if request.signal.aborted:
            raise StartAborted(f"subagent start aborted: {request.signal.reason}")
        run = module.A2ARun(self.name, request, self.config)
        launched: SubagentRun = await run.launch()
        return launched
