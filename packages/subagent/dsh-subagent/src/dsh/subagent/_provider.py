"""The ``SubagentProvider`` protocol: one transport that can run a child."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from dsh.subagent._run import SubagentRun
from dsh.subagent._types import SubagentCapabilities, SubagentStartRequest

if TYPE_CHECKING:
    from dsh.core import Agent

__all__ = ["ContinuableProvider", "SubagentProvider", "supports_continuable"]


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

    Optional: ``max_running: int | None``, the provider's default cap on its running
    children in one context (the runtime queues further starts; the ``dsh-subagent``
    plugin's ``providers`` config overrides it). Providers of local processes declare
    :func:`dsh.subagent.kit.process_max_running` (the cores); in-process providers
    None (no cap); a provider without the attribute has no cap.
    """

    name: str
    capabilities: SubagentCapabilities
    inherits_parent_context: bool

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Start a child for ``request`` and publish it as a run."""
        ...


@runtime_checkable
class ContinuableProvider(SubagentProvider, Protocol):
    """A provider that can run continuable children (has ``prepare_continuable``)."""

    async def prepare_continuable(
        self, request: SubagentStartRequest, *, resume: str | None = None
    ) -> Agent:
        """The child's activation: an agent with no turn started (the runtime
        delivers the messages and watches its turns).

        Without ``resume``: a new child for ``request`` (its session persisted when
        the context has a session store). With ``resume``: re-open the persisted
        child session ``resume`` with the scope ``request`` carries (rebuilt by the
        runtime from the child's own record); ``request.parent`` is the live parent.
        Must honour ``request.signal`` and leave nothing running if it raises.
        """
        ...


def supports_continuable(provider: SubagentProvider) -> bool:
    """True if ``provider`` has ``prepare_continuable``."""
    return callable(getattr(provider, "prepare_continuable", None))
