"""The ``SubagentProvider`` protocol: one transport that can run a child."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from dsh.subagent.run import SubagentRun
from dsh.subagent.types import SubagentCapabilities, SubagentStartRequest

__all__ = ["SubagentProvider", "supports_continuable"]


@runtime_checkable
class SubagentProvider(Protocol):
    """A named way to run a child agent.

    ``capabilities`` says which optional request fields it honours (the runtime
    rejects the others before ``start`` runs). ``inherits_parent_context`` is
    descriptive: True when the child starts from the parent's history (the tool
    words its prompt by it). Continuable providers also define
    ``async prepare_continuable(request)``: having the method is the capability.

    ``start`` must honour the request's signal; if it raises, it must leave
    nothing running. Once it returns the run, every outcome settles the run.
    """

    name: str
    capabilities: SubagentCapabilities
    inherits_parent_context: bool

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start a child for ``request`` and publish it as a run."""
        ...


def supports_continuable(provider: SubagentProvider) -> bool:
    """True if ``provider`` has ``prepare_continuable``."""
    return callable(getattr(provider, "prepare_continuable", None))
