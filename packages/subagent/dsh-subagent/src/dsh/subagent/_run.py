"""A started child: the caller's :class:`SubagentRun` and the provider's :class:`RunHandle`.

A provider makes a :class:`RunHandle` when its child is ready, returns
``handle.run`` from ``start`` (publication: ownership passes to the caller), and
later settles the handle exactly once. The caller's :class:`SubagentRun` can only
read, watch and dispose: ``await run.result`` never raises for a child or model
failure (that is a result with stop reason ``error``); it raises only for an
infrastructure fault the provider reports with :meth:`RunHandle.fail`.

Giving up waiting never changes the outcome: cancelling a task that awaits
``run.result`` leaves the child running. Only the request's signal and
:meth:`SubagentRun.dispose` stop it. ``dispose`` runs the provider's teardown in a
task of its own, so a caller cancelled while disposing (once or twice) still
leaves nothing behind: the teardown finishes, and the run counts as disposed only
then.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from dsh.subagent._progress import SubagentProgress
from dsh.subagent._types import SubagentResult

if TYPE_CHECKING:
    from dsh.core import Agent

__all__ = ["DEFAULT_PROGRESS_BUFFER", "ProgressSink", "ProgressStream", "RunHandle", "SubagentRun"]

_log = logging.getLogger("dsh.subagent.run")

DEFAULT_PROGRESS_BUFFER = 1024
"""Items a :meth:`SubagentRun.progress` subscriber may fall behind before the oldest
are dropped."""

SettleListener = Callable[[SubagentResult | None, BaseException | None], None]
ProgressSink = Callable[["RunHandle", SubagentProgress], None]
"""Called for every item a run emits (the runtime's hook: bus and ancestor runs)."""


class _Cell:
    """An awaitable that settles once, with a result or an exception."""

    __slots__ = ("_error", "_event", "_listeners", "_result", "_settled")

    def __init__(self) -> None:
        self._settled = False
        self._result: SubagentResult | None = None
        self._error: BaseException | None = None
        self._event: asyncio.Event | None = None
        self._listeners: list[SettleListener] | None = None

    def settle(self, result: SubagentResult | None, error: BaseException | None) -> bool:
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

    def add_listener(self, listener: SettleListener) -> None:
        if self._settled:
            _call(listener, self._result, self._error)
            return
        if self._listeners is None:
            self._listeners = []
        self._listeners.append(listener)

    async def wait(self) -> SubagentResult:
        if not self._settled:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class _Result:
    """``run.result``: await it (any number of times, from any task)."""

    __slots__ = ("_cell",)

    def __init__(self, cell: _Cell) -> None:
        self._cell = cell

    @property
    def settled(self) -> bool:
        """True once a result or an error is in."""
        return self._cell._settled

    def peek(self) -> SubagentResult | None:
        """The result if settled with one, else None (never raises)."""
        return self._cell._result

    def __await__(self) -> Generator[Any, None, SubagentResult]:
        return self._cell.wait().__await__()


def _call(
    listener: SettleListener, result: SubagentResult | None, error: BaseException | None
) -> None:
    try:
        listener(result, error)
    except Exception:
        _log.exception("settle listener %r failed", listener)


class _Subscription:
    __slots__ = ("buffer", "dropped", "limit", "waiter")

    def __init__(self, limit: int) -> None:
        self.buffer: deque[SubagentProgress] = deque()
        self.limit = limit
        self.dropped = 0
        self.waiter: asyncio.Future[None] | None = None

    def push(self, item: SubagentProgress) -> None:
        buffer = self.buffer
        if len(buffer) >= self.limit:
            buffer.popleft()
            self.dropped += 1
        buffer.append(item)
        self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class ProgressStream:
    """``async for item in run.progress()``: a run's items until it settles.

    A subscriber that falls behind never slows the child: beyond ``buffer`` items the
    oldest are dropped and counted in :attr:`dropped`. Iteration ends once the run
    has settled and the items emitted before that have been read. ``aclose()`` (or
    leaving an ``async with``) unsubscribes early.
    """

    __slots__ = ("_handle", "_sub")

    def __init__(self, handle: RunHandle, buffer: int) -> None:
        if buffer < 1:
            raise ValueError(f"progress buffer must hold at least 1 item, got {buffer}")
        self._handle = handle
        self._sub = _Subscription(buffer)
        handle._subscribe(self._sub)

    @property
    def dropped(self) -> int:
        """Items dropped so far because this subscriber fell behind."""
        return self._sub.dropped

    def __aiter__(self) -> ProgressStream:
        return self

    async def __anext__(self) -> SubagentProgress:
        sub = self._sub
        while not sub.buffer:
            subs = self._handle._subs
            if self._handle._cell._settled or subs is None or sub not in subs:
                self._handle._unsubscribe(sub)
                raise StopAsyncIteration
            sub.waiter = asyncio.get_running_loop().create_future()
            try:
                await sub.waiter
            finally:
                sub.waiter = None
        return sub.buffer.popleft()

    async def aclose(self) -> None:
        """Stop receiving items."""
        self._handle._unsubscribe(self._sub)
        self._sub.buffer.clear()

    async def __aenter__(self) -> ProgressStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class RunHandle:
    """The provider's side of one run: settle it, report progress, see it disposed.

    ``dispose`` is the coroutine function that stops the child and waits until it
    is quiescent; the run calls it once, in a task of its own. ``dispose_now`` (in-
    process providers) tears down synchronously and returns True when the child is
    already quiescent (else False, and ``dispose`` runs). ``on_progress_wanted`` is
    called (once) when someone first wants this run's progress; the disposer it
    returns runs at settlement, so a provider pays for mapping its transport's
    updates only while someone listens.
    """

    __slots__ = (
        "__weakref__",
        "_cell",
        "_dispose",
        "_dispose_error",
        "_dispose_now",
        "_disposed",
        "_disposed_listeners",
        "_disposing",
        "_on_watch",
        "_progress_off",
        "_progress_source",
        "_sink",
        "_subs",
        "_wanted",
        "run",
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
        on_progress_wanted: Callable[[RunHandle], Callable[[], None] | None] | None = None,
    ) -> None:
        self._cell = _Cell()
        self._dispose = dispose
        self._dispose_now = dispose_now
        self._disposing: asyncio.Task[None] | None = None
        self._disposed = False
        self._dispose_error: BaseException | None = None
        self._disposed_listeners: list[Callable[[], object]] | None = None
        self._subs: list[_Subscription] | None = None
        self._sink: ProgressSink | None = None
        self._progress_source = on_progress_wanted
        self._progress_off: Callable[[], None] | None = None
        self._wanted = False
        self._on_watch: Callable[[], None] | None = None
        self.run = SubagentRun(self, id, provider, label, local_agent)
        """The caller's view of this run (what ``start`` returns)."""

    @property
    def id(self) -> str:
        """The run id."""
        return self.run.id

    @property
    def settled(self) -> bool:
        """True once the result is in."""
        return self._cell._settled

    @property
    def disposed(self) -> bool:
        """True once the run's dispose has finished."""
        return self._disposed

    # -- settlement ------------------------------------------------------------------

    def settle(self, result: SubagentResult) -> bool:
        """Settle with ``result`` (first call wins; later calls return False)."""
        if self._cell.settle(result, None):
            self._after_settle()
            return True
        return False

    def fail(self, error: BaseException) -> bool:
        """Settle with an infrastructure error (first call wins)."""
        if self._cell.settle(None, error):
            self._after_settle()
            return True
        return False

    def on_settled(self, listener: SettleListener) -> None:
        """Call ``listener(result, error)`` on settlement (now, if settled)."""
        self._cell.add_listener(listener)

    def _after_settle(self) -> None:
        off, self._progress_off = self._progress_off, None
        if off is not None:
            try:
                off()
            except Exception:
                _log.exception("stopping progress of run %s failed", self.run.id)
        for sub in self._subs or ():
            sub.wake()

    # -- progress --------------------------------------------------------------------

    @property
    def wants_progress(self) -> bool:
        """True while someone listens to this run's progress (subscriber or runtime)."""
        return self._wanted

    def emit(self, item: SubagentProgress) -> None:
        """Report one progress item (no effect once settled or when nobody listens)."""
        if not self._wanted or self._cell._settled:
            return
        subs = self._subs
        if subs:
            for sub in subs:
                sub.push(item)
        sink = self._sink
        if sink is not None:
            try:
                sink(self, item)
            except Exception:
                _log.exception("progress sink of run %s failed", self.run.id)

    def deliver(self, item: SubagentProgress) -> None:
        """Hand ``item`` to this run's own subscribers only (the runtime forwards
        nested runs' items this way)."""
        if self._cell._settled:
            return
        for sub in self._subs or ():
            sub.push(item)

    def set_sink(self, sink: ProgressSink | None) -> None:
        """The runtime's hook for every emitted item (None: none); turns progress on."""
        self._sink = sink
        if sink is not None:
            self.want_progress()

    def want_progress(self) -> None:
        """Turn this run's progress on (starts the provider's source once)."""
        if self._wanted or self._cell._settled:
            return
        self._wanted = True
        source = self._progress_source
        if source is not None:
            self._progress_source = None
            try:
                self._progress_off = source(self)
            except Exception:
                _log.exception("starting progress of run %s failed", self.run.id)
        watch = self._on_watch
        if watch is not None:
            watch()

    def _subscribe(self, sub: _Subscription) -> None:
        if self._subs is None:
            self._subs = []
        self._subs.append(sub)
        self.want_progress()

    def _unsubscribe(self, sub: _Subscription) -> None:
        if self._subs is not None and sub in self._subs:
            self._subs.remove(sub)
            sub.wake()

    @property
    def has_subscribers(self) -> bool:
        """True while a :meth:`SubagentRun.progress` iterator is open."""
        return bool(self._subs)

    # -- disposal --------------------------------------------------------------------

    def on_disposed(self, listener: Callable[[], object]) -> None:
        """Call ``listener()`` once the run's dispose has finished (now, if it has)."""
        if self._disposed:
            listener()
            return
        if self._disposed_listeners is None:
            self._disposed_listeners = []
        self._disposed_listeners.append(listener)

    async def _run_dispose(self) -> None:
        try:
            await self._dispose()
        except asyncio.CancelledError:
            self._dispose_error = RuntimeError("the run's teardown was cancelled")
            raise
        except Exception as exc:
            self._dispose_error = exc
        finally:
            self._finish_dispose()

    def _finish_dispose(self) -> None:
        self._disposed = True
        for listener in self._disposed_listeners or ():
            try:
                listener()
            except Exception:
                _log.exception("dispose listener %r failed", listener)
        self._disposed_listeners = None
        if not self._cell._settled:
            # A provider that forgot to settle on dispose must not leave waiters hanging.
            self.settle(SubagentResult.aborted("run disposed before it settled"))

    def __repr__(self) -> str:
        return f"<RunHandle {self.run.provider}:{self.run.id}>"


class SubagentRun:
    """A started child run: ``id``, ``provider``, ``label``, ``local_agent`` (the child
    agent of in-process providers, else None), awaitable ``result``, ``progress()``,
    ``dispose()``; an async context manager that disposes on exit.
    """

    __slots__ = ("_handle", "id", "label", "local_agent", "provider", "result")

    def __init__(
        self,
        handle: RunHandle,
        id: str,
        provider: str,
        label: str | None,
        local_agent: Agent | None,
    ) -> None:
        self._handle = handle
        self.id = id
        self.provider = provider
        self.label = label
        self.local_agent = local_agent
        self.result = _Result(handle._cell)
        """Awaitable :class:`~dsh.subagent.SubagentResult` (``await run.result``)."""

    @property
    def settled(self) -> bool:
        """True once the result is in."""
        return self._handle._cell._settled

    @property
    def disposed(self) -> bool:
        """True once :meth:`dispose` has finished."""
        return self._handle._disposed

    def progress(self, *, buffer: int = DEFAULT_PROGRESS_BUFFER) -> ProgressStream:
        """The run's progress items, live, until it settles (see :class:`ProgressStream`)."""
        return ProgressStream(self._handle, buffer)

    def on_settled(self, listener: SettleListener) -> None:
        """Call ``listener(result, error)`` when the run settles (now, if it has)."""
        self._handle._cell.add_listener(listener)

    async def dispose(self) -> None:
        """Stop what is left and wait until the child is quiescent. Idempotent.

        The teardown runs in a task of its own: a caller cancelled here gets its
        cancellation, and the teardown still finishes. A teardown failure is raised
        (to every caller).
        """
        handle = self._handle
        if handle._disposed:
            if handle._dispose_error is not None:
                raise handle._dispose_error
            return
        task = handle._disposing
        if task is None:
            quick = handle._dispose_now
            if quick is not None:
                try:
                    done = quick()
                except Exception as exc:
                    done, handle._dispose_error = True, exc
                if done:
                    handle._finish_dispose()
                    if handle._dispose_error is not None:
                        raise handle._dispose_error
                    return
            task = handle._disposing = asyncio.get_running_loop().create_task(
                handle._run_dispose(), name=f"dispose {self.provider}:{self.id}"
            )
        await asyncio.shield(task)
        if handle._dispose_error is not None:
            raise handle._dispose_error

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
