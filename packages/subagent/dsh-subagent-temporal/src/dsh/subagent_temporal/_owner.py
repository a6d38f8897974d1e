"""What a :class:`~dsh.subagent_temporal._run.TemporalRun` needs from the provider
that started it: the shared client, batcher, store and journal, and a late stop.

A Protocol, so the run depends on this narrow port and the provider on the run, one way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from temporalio.client import Client

    from dsh.core import Context
    from dsh.subagent_temporal._batch import Batch, Batcher, Member
    from dsh.subagent_temporal._config import TemporalProviderConfig
    from dsh.subagent_temporal._journal import DelegationJournal
    from dsh.subagent_temporal._store import ResultStore

__all__ = ["RunOwner"]


class RunOwner(Protocol):
    """The provider side of a Temporal run (``TemporalProvider`` is one)."""

    name: str
    config: TemporalProviderConfig

    async def client(self) -> Client:
        """The provider's client on this event loop."""
        ...

    async def batcher(self) -> Batcher:
        """The batcher of this event loop."""
        ...

    async def find_batch(self, workflow_id: str) -> Batch:
        """The batch workflow ``workflow_id`` (raises ``NotResumable`` if unknown)."""
        ...

    def deliver_later(self, ctx: Context, member: Member, reason: str, *, terminate: bool) -> None:
        """Keep trying to stop ``member``'s delegation while ``ctx`` is open."""
        ...

    def target(self) -> str:
        """The server's address, for messages."""
        ...

    def store(self) -> ResultStore | None:
        """The result store, if one is configured."""
        ...

    def journal(self, ctx: Context) -> DelegationJournal | None:
        """The journal in force for ``ctx``."""
        ...
