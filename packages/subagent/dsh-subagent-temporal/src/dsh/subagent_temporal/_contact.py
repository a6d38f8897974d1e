"""Whether this worker still reaches its Temporal server, for the attempts it runs.

An attempt's heartbeat (``activity.heartbeat``) is fire-and-forget: the SDK sends it
when it can and says nothing when it cannot. An attempt whose server is out of reach
for longer than its ``heartbeat_timeout`` is lost — once the server is back it times
the attempt out and starts the next one, on any worker — but the attempt would only
learn so at its first heartbeat after that, and meanwhile its child goes on: model
calls and tool runs nobody can collect, at the same time as the next attempt's once
that one has started (two attempts on one tape).

:class:`ServerContact` lets an attempt find out first. While attempts run, the worker
asks the server a cheap question (``GetSystemInfo``) every heartbeat period and notes
when the last one that was answered was **sent**. An attempt that has heard nothing
for ``heartbeat_timeout`` less one heartbeat period (counted from that send, or from
its own start if later) is presumed lost, and the worker stops its child: the last
heartbeat that reached the server went out at most one period before that probe, so
the server's own deadline has not passed yet and the next attempt cannot have started.
Any answer counts as contact, an error included, except the ones that mean no server
answered (unavailable, deadline exceeded, a timeout). The price: an outage just
shorter than ``heartbeat_timeout`` may cost an attempt the server would have kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["Probe", "ServerContact", "Watch", "system_info_probe"]

Probe = Callable[[float], Awaitable[object]]
"""Asks the server something within the given seconds; raises if it cannot."""

_UNREACHABLE = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "INTERNAL", "CANCELLED"}
"""gRPC status codes that mean no server answered (as the provider's ``_batch``)."""


def system_info_probe(client: Client) -> Probe:
    """A probe that asks ``client``'s server ``GetSystemInfo`` (no SDK retry)."""
    from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

    async def probe(within: float) -> object:
        return await client.workflow_service.get_system_info(
            GetSystemInfoRequest(), retry=False, timeout=timedelta(seconds=within)
        )

    return probe


class Watch:
    """One attempt's view of the contact (see :meth:`ServerContact.watching`)."""

    def __init__(self, contact: ServerContact, every: float) -> None:
        self.contact = contact
        self.every = every
        self.started = contact.clock()

    def silent_for(self) -> float:
        """Seconds since the server last answered a probe sent after this attempt
        started (or since it started)."""
        return self.contact.clock() - max(self.contact.last_reached, self.started)


class ServerContact:
    """When the server was last reached (see the module); one per worker, probing only
    while at least one attempt watches it."""

    def __init__(self, probe: Probe | None = None, clock: Callable[[], float] = time.monotonic):
        self.probe = probe
        self.clock = clock
        self.last_reached = clock()
        """Monotonic time the last answered probe was sent."""
        self.last_error = ""
        """Why the last probe got no answer ('' after one that did)."""
        self._watches: set[Watch] = set()
        self._task: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def watching(self, every: float, probe: Probe | None = None) -> AsyncIterator[Watch]:
        """Watch the contact for an attempt, probing at least every ``every`` seconds
        while it does; ``probe`` is taken if none was given yet."""
        if self.probe is None:
            self.probe = probe
        watch = Watch(self, every)
        self._watches.add(watch)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="the Temporal server's contact"
            )
        try:
            yield watch
        finally:
            self._watches.discard(watch)
            task = self._task
            if not self._watches and task is not None:
                self._task = None
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _run(self) -> None:
        while self._watches:
            every = min(w.every for w in self._watches)
            sent = self.clock()
            if await self._ask(every):
                self.last_reached = max(self.last_reached, sent)
            await asyncio.sleep(max(0.0, every - (self.clock() - sent)))

    async def _ask(self, within: float) -> bool:
        from temporalio.service import RPCError

        if self.probe is None:
            return True
        try:
            await asyncio.wait_for(self.probe(within), within + 0.5)
        except TimeoutError:
            self.last_error = f"no answer within {within:g} s"
            return False
        except RPCError as exc:
            if exc.status.name not in _UNREACHABLE:
                self.last_error = ""
                return True  # the server answered, if only to refuse
            self.last_error = exc.message or exc.status.name
            return False
        except Exception as exc:  # the SDK's client errors: no server there
            self.last_error = f"{type(exc).__name__}: {exc}"
            return False
        self.last_error = ""
        return True
