"""One session of ``dsh acp``: its agent, the ordered queue of its updates, and what to
undo when it goes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from dsh.acp._updates import SessionUpdates, Update
from dsh.core import Agent as DshAgent
from dsh.core.lifecycle import Disposer
from dsh.subagent.kit import RelayWatch

__all__ = ["Session", "run_closers"]

_log = logging.getLogger("dsh.acp")


@dataclass(eq=False)
class Session:
    """One ACP session: its agent, and the ordered queue of updates to the client."""

    agent: DshAgent
    updates: asyncio.Queue[Update] = field(default_factory=asyncio.Queue)
    mapping: SessionUpdates = field(init=False)
    """Events as updates, permission requests after their tool call (``_updates``)."""
    pump: asyncio.Task[None] | None = None
    unobserve: Disposer | None = None
    prompting: bool = False
    last_used: float = field(default_factory=time.monotonic)
    relay: RelayWatch | None = None
    """The delegations under this session's agent, relayed as updates."""
    closers: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)
    """What to undo when the session goes: its approver, its MCP servers."""

    def __post_init__(self) -> None:
        self.mapping = SessionUpdates(self.agent, self.updates)


async def run_closers(session: Session) -> None:
    """Undo what ``session`` set up, last first; a closer that fails is logged."""
    closers, session.closers = session.closers, []
    for closer in reversed(closers):
        try:
            outcome = closer()
            if outcome is not None:
                await outcome
        except Exception:
            _log.exception("closing part of session %s failed", session.agent.id)
