"""``SubagentRun``: the single point of publication of a started child.

A provider builds a run, hands it back from ``start`` (publication: ownership
passes to the caller), and later settles it exactly once with a
:class:`~dsh.subagent.types.SubagentResult`. ``await run.result`` never raises for
a child or model failure (that is a result with stop reason ``error``); it raises
only for an infrastructure fault the provider reports with :meth:`SubagentRun.fail`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from dsh.subagent.types import SubagentResult

if TYPE_CHECKING:
    from dsh.core import Agent

__all__ = ["ResultCell", "SettleListener", "SubagentRun"]

_log = logging.getLogger("dsh.subagent.run")

SettleListener = Callable[[SubagentResult | None, BaseException | None], None]


class ResultCell:
    """An awaitable that settles once, with a result or an exception.

    Await it any number of times; listeners run synchronously on settlement.
    """

    __slots__ = ("_drive", "_error", "_event", "_listeners", "_result", "_settled")

    def __init__(self, drive: Callable[[], Awaitable[None]] | None = None) -> None:
        self._drive = drive
        self._settled = False
        self._result: SubagentResult | None = None
        self._error: BaseException | None = None
        self._event: asyncio.Event | None = None
        self._listeners: list[SettleListener] | None = None

    @property
    def settled(self) -> bool:
        """True once a result or an error is in."""
        return self._settled

    def peek(self) -> SubagentResult | None:
        """The result if settled with one, else None (never raises)."""
        return self._result

    def set(self, result: SubagentResult) -> bool:
        """Settle with ``result``; False (and no effect) if already settled."""
        return self._settle(result, None)

    def fail(self, error: BaseException) -> bool:
        """Settle with an infrastructure error; False if already settled."""
        return self._settle(None, error)

    def add_listener(self, listener: SettleListener) -> None:
        """Call ``listener(result, error)`` on settlement (now, if already settled)."""
        if self._settled:
            _call(listener, self._result, self._error)
            return
        if self._listeners is None:
            self._listeners = []
        self._listeners.append(listener)

    def _settle(self, result: SubagentResult | None, error: BaseException | None) -> bool:
        if self._settled:
            return False
        self._settled = True
        self._result = result
        self._error = error
        if self._event is not None:
            self._event.set()
        listeners, self._listeners = self._listeners, None
        for listener in listeners or ():
            _call(listener, result, error)
        return True

    async def wait(self) -> SubagentResult:
        """Wait for settlement; return the result or raise the infrastructure error.

        The first waiter runs the provider's ``drive`` hook (if any) in its own task.
        """
        if not self._settled and self._drive is not None:
            drive, self._drive = self._drive, None
            await drive()
        if not self._settled:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def __await__(self) -> Generator[Any, None, SubagentResult]:
        return self.wait().__await__()


def _call(
    listener: SettleListener, result: SubagentResult | None, error: BaseException | None
) -> None:
    try:
        listener(result, error)
    except Exception:
        _log.exception("settle listener %r failed", listener)


class SubagentRun:
    """A started child run: ``id``, ``local_agent``, awaitable ``result``, ``dispose()``.

    Providers construct it with the coroutine function that tears the child down;
    :meth:`dispose` calls it once (later and concurrent calls wait for that one)
    and returns when the child is quiescent. Use as an async context manager to
    dispose on exit.

    Two optional fast paths for in-process providers: ``dispose_now()`` tears
    down synchronously and returns True when the child is already quiescent
    (else False, and ``dispose`` runs); ``drive()`` lets the first waiter of
    ``result`` make the child progress in the waiter's own task.
    """

    __slots__ = (
        "_cell",
        "_dispose",
        "_dispose_error",
        "_dispose_now",
        "_disposed",
        "_disposed_listeners",
        "_disposing",
        "id",
        "label",
        "local_agent",
        "provider",
    )

    def __init__(
        self,
        id: str,
        *,
        provider: str,
        dispose: Callable[[], Awaitable[None]],
        local_agent: Agent | None = None,
        label: str | None = None,
        dispose_now: Callable[[], bool] | None = None,
        drive: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.id = id
        self.provider = provider
        self.local_agent = local_agent
        self.label = label
        self._cell = ResultCell(drive)
        self._dispose = dispose
        self._dispose_now = dispose_now
        self._disposing: asyncio.Event | None = None
        self._disposed = False
        self._dispose_error: BaseException | None = None
        self._disposed_listeners: list[Callable[[], object]] | None = None

    @property
    def result(self) -> ResultCell:
        """Awaitable :class:`~dsh.subagent.types.SubagentResult`."""
        return self._cell

    @property
    def settled(self) -> bool:
        """True once the result is in."""
        return self._cell.settled

    @property
    def disposed(self) -> bool:
        """True once :meth:`dispose` has finished."""
        return self._disposed

    # provider side ------------------------------------------------------------------

    def settle(self, result: SubagentResult) -> bool:
        """Provider: settle with ``result`` (first call wins)."""
        return self._cell.set(result)

    def fail(self, error: BaseException) -> bool:
        """Provider: settle with an infrastructure error (first call wins)."""
        return self._cell.fail(error)

    def on_disposed(self, listener: Callable[[], object]) -> None:
        """Call ``listener()`` once :meth:`dispose` has finished (now, if it has)."""
        if self._disposed:
            listener()
            return
        if self._disposed_listeners is None:
            self._disposed_listeners = []
        self._disposed_listeners.append(listener)

    # caller side --------------------------------------------------------------------

    async def dispose(self) -> None:
        """Cancel what is left and wait until the child is quiescent. Idempotent.

        Runs shielded from the caller's cancellation, so a cancelled caller still
        leaves nothing behind. A teardown failure is raised (to every caller).
        """
        if self._disposed:
            if self._dispose_error is not None:
                raise self._dispose_error
            return
        if self._disposing is not None:
            with anyio.CancelScope(shield=True):
                await self._disposing.wait()
            if self._dispose_error is not None:
                raise self._dispose_error
            return
        if self._dispose_now is not None:
            try:
                done = self._dispose_now()
            except Exception as exc:
                done, self._dispose_error = True, exc
            if done:
                self._finish_dispose()
                if self._dispose_error is not None:
                    raise self._dispose_error
                return
        self._disposing = asyncio.Event()
        try:
            with anyio.CancelScope(shield=True):
                await self._dispose()
        except Exception as exc:
            self._dispose_error = exc
        finally:
            self._disposing.set()
            self._finish_dispose()
        if self._dispose_error is not None:
            raise self._dispose_error

    def _finish_dispose(self) -> None:
        self._disposed = True
        for listener in self._disposed_listeners or ():
            try:
                listener()
            except Exception:
                _log.exception("dispose listener %r failed", listener)
        self._disposed_listeners = None
        if not self._cell.settled:
            # A provider that forgot to settle on dispose must not leave waiters hanging.
            self._cell.set(SubagentResult.aborted("run disposed before it settled"))

    async def __aenter__(self) -> SubagentRun:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.dispose()

    def __repr__(self) -> str:
        state = "settled" if self.settled else "live"
        return f"<SubagentRun {self.provider}:{self.id} {state}>"
