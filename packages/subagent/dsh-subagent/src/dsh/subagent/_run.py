"""A started child: the caller's :class:`SubagentRun` and the provider's :class:`RunHandle`.

A provider makes a :class:`RunHandle` when its child is ready, returns
``handle.run`` from ``start`` (publication: ownership passes to the caller), and
later settles the handle exactly once. The caller's :class:`SubagentRun` can only
read, watch and dispose: ``await run.result`` never raises for a child or model
failure (that is a result with stop reason ``error``); it raises only for an
infrastructure fault the provider reports with :meth:`RunHandle.fail`.

Giving up waiting never changes the outcome: cancelling a task that awaits
``run.result`` leaves the child running (each waiter waits on a future of its own).
Only the request's signal and :meth:`SubagentRun.dispose` stop it. ``dispose`` runs
the provider's teardown in a task of its own, so a caller cancelled while disposing
(once or twice) still leaves nothing behind: the teardown finishes, and the run
counts as disposed only then.

The runtime watches a run through its *observer port*: :meth:`RunHandle.attach`
(one :class:`RunObserver` per run, told of settlement and of the end of dispose),
the read-only properties, and :func:`handle_of` (a run's handle).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from dsh.subagent._stream import DEFAULT_PROGRESS_BUFFER, ProgressHub, ProgressSink, ProgressStream
from dsh.subagent._types import SubagentResult

if TYPE_CHECKING:
    from dsh.core import Agent

__all__ = [
    "DEFAULT_PROGRESS_BUFFER",
    "ProgressSink",
    "ProgressStream",
    "RunHandle",
    "RunObserver",
    "SubagentRun",
    "handle_of",
]

_log = logging.getLogger("dsh.subagent.run")

SettleListener = Callable[[SubagentResult | None, BaseException | None], None]


class RunObserver(Protocol):
    """The runtime's per-run record (:meth:`RunHandle.attach`): told of settlement
    and of the end of dispose without a listener list or closures per run."""

    def settled(self, result: SubagentResult | None, error: BaseException | None) -> None:
        """The run settled with ``result`` (None with an infrastructure ``error``)."""

    def disposed(self) -> None:
        """The run's dispose has finished (the handle then forgets its observer)."""

    def progress_wanted(self) -> None:
        """Someone turned the run's progress on (before it settled)."""


class _Result:
    """``run.result``: await it (any number of times, from any task)."""

    __slots__ = ("_handle",)

    def __init__(self, handle: RunHandle) -> None:
        self._handle = handle

    @property
    def settled(self) -> bool:
        """True once a result or an error is in."""
        return self._handle._settled

    def peek(self) -> SubagentResult | None:
        """The result if settled with one, else None (never raises)."""
        return self._handle._result

    def __await__(self) -> Generator[Any, None, SubagentResult]:
        handle = self._handle
        if not handle._settled:
            handle.start_now()  # (an in-process child that never waits settles right here)
        if not handle._settled:
            # Yield once first (what ``asyncio.sleep(0)`` does, without its two calls):
            # a child whose task is already scheduled and ends in its next step has
            # settled when this waiter resumes, in the same loop iteration, without a
            # future or a wake-up.
            yield
            if not handle._settled:
                yield from handle._wait().__await__()
        if handle._error is not None:
            raise handle._error
        assert handle._result is not None
        return handle._result


def _call(
    listener: SettleListener, result: SubagentResult | None, error: BaseException | None
) -> None:
    try:
        listener(result, error)
    except Exception:
        _log.exception("settle listener %r failed", listener)


class RunHandle(ProgressHub):
    """The provider's side of one run: settle it, report progress, see it disposed.

    ``dispose`` is the coroutine function that stops the child and waits until it
    is quiescent; the run calls it once, in a task of its own. ``dispose_now`` (in-
    process providers) tears down synchronously and returns True when the child is
    already quiescent (else False, and ``dispose`` runs). ``on_progress_wanted`` is
    called (once) when someone first wants this run's progress; the disposer it
    returns runs at settlement, so a provider pays for mapping its transport's
    updates only while someone listens.

    A provider may subclass it instead and override :meth:`_teardown`,
    :meth:`_teardown_now` and :meth:`_start_progress` (then ``dispose`` may be
    omitted): one object per run instead of a handle plus closures.

    Memory: the handle holds its hooks only until they have run (the teardown
    hooks until dispose has finished, the progress hooks until settlement) and
    holds the caller's :class:`SubagentRun` only until dispose has finished, so a
    disposed run leaves no reference cycle behind for the garbage collector.
    """

    __slots__ = (
        "__weakref__",
        "_dispose",
        "_dispose_error",
        "_dispose_now",
        "_disposed",
        "_disposed_listeners",
        "_disposing",
        "_error",
        "_label",
        "_listeners",
        "_local_agent",
        "_observer",
        "_provider",
        "_result",
        "_run",
        "_waiters",
    )

    def __init__(
        self,
        id: str,
        *,
        provider: str,
        dispose: Callable[[], Awaitable[None]] | None = None,
        local_agent: Agent | None = None,
        label: str | None = None,
        dispose_now: Callable[[], bool] | None = None,
        on_progress_wanted: Callable[[RunHandle], Callable[[], None] | None] | None = None,
    ) -> None:
        super().__init__(id, on_progress_wanted)
        self._provider = provider
        self._label = label
        self._local_agent = local_agent
        self._result: SubagentResult | None = None
        self._error: BaseException | None = None
        self._waiters: list[asyncio.Future[None]] | None = None
        self._listeners: list[SettleListener] | None = None
        self._observer: RunObserver | None = None
        self._dispose = dispose
        self._dispose_now = dispose_now
        self._disposing: asyncio.Task[None] | None = None
        self._disposed = False
        self._dispose_error: BaseException | None = None
        self._disposed_listeners: list[Callable[[], object]] | None = None
        self._run: SubagentRun | None = None

    @property
    def run(self) -> SubagentRun:
        """The caller's view of this run (what ``start`` returns).

        The same object until the run's dispose has finished; the handle lets go of
        it then (the run keeps its handle, not the other way round)."""
        run = self._run
        if run is None:
            run = SubagentRun(self)
            if not self._disposed:
                self._run = run
        return run

    @property
    def id(self) -> str:
        """The run id."""
        return self._id

    @property
    def provider(self) -> str:
        """The provider's name."""
        return self._provider

    @property
    def label(self) -> str | None:
        """The run's label (the request's), or None."""
        return self._label

    @property
    def local_agent(self) -> Agent | None:
        """The child agent of an in-process run, else None."""
        return self._local_agent

    @property
    def settled(self) -> bool:
        """True once the result is in."""
        return self._settled

    @property
    def disposed(self) -> bool:
        """True once the run's dispose has finished."""
        return self._disposed

    # -- the observer port -------------------------------------------------------------

    def attach(self, observer: RunObserver) -> None:
        """Make ``observer`` the runtime's record of this run (one per run). It hears
        of settlement and of the end of dispose, at once if they already happened (a
        provider may settle, even dispose, before it returns the run)."""
        self._observer = observer
        if self._settled:
            observer.settled(self._result, self._error)
        if self._disposed:
            self._observer = None
            observer.disposed()

    def _progress_wanted(self) -> None:
        observer = self._observer
        if observer is not None:
            observer.progress_wanted()

    def start_now(self) -> None:
        """Someone awaits the result: start the child now if its start is pending (an
        in-process provider starts its child's turn at the loop's next iteration, so
        that whoever got the run can subscribe to its progress first, or at once when
        its result is awaited). Default: nothing."""

    # -- settlement ------------------------------------------------------------------

    def settle(self, result: SubagentResult) -> bool:
        """Settle with ``result`` (first call wins; later calls return False)."""
        return self._settle(result, None)

    def fail(self, error: BaseException) -> bool:
        """Settle with an infrastructure error (first call wins)."""
        return self._settle(None, error)

    def _settle(self, result: SubagentResult | None, error: BaseException | None) -> bool:
        if self._settled:
            return False
        self._settled = True
        self._result = result
        self._error = error
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)
        observer = self._observer
        if observer is not None:
            try:
                observer.settled(result, error)
            except Exception:
                _log.exception("settling run %s: the runtime's observer failed", self._id)
        listeners, self._listeners = self._listeners, None
        for listener in listeners or ():
            _call(listener, result, error)
        self._end_progress()
        return True

    def on_settled(self, listener: SettleListener) -> None:
        """Call ``listener(result, error)`` on settlement (now, if settled)."""
        if self._settled:
            _call(listener, self._result, self._error)
            return
        if self._listeners is None:
            self._listeners = []
        self._listeners.append(listener)

    async def _wait(self) -> None:
        # A future per waiter: a waiter that gives up cancels only its own.
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            waiters = self._waiters
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)

    # -- disposal --------------------------------------------------------------------

    def on_disposed(self, listener: Callable[[], object]) -> None:
        """Call ``listener()`` once the run's dispose has finished (now, if it has)."""
        if self._disposed:
            listener()
            return
        if self._disposed_listeners is None:
            self._disposed_listeners = []
        self._disposed_listeners.append(listener)

    async def _teardown(self) -> None:
        """Stop the child and wait until it is quiescent (runs once, in a task of its
        own). Default: ``dispose``."""
        dispose = self._dispose
        if dispose is not None:
            await dispose()

    def _teardown_now(self) -> bool:
        """Tear down synchronously if the child is already quiescent (True), else
        False (then :meth:`_teardown` runs). Default: ``dispose_now``."""
        quick = self._dispose_now
        return quick() if quick is not None else False

    async def _run_dispose(self) -> None:
        try:
            await self._teardown()
        except asyncio.CancelledError:
            self._dispose_error = RuntimeError("the run's teardown was cancelled")
            raise
        except Exception as exc:
            self._dispose_error = exc
        finally:
            self._finish_dispose()

    def _finish_dispose(self) -> None:
        self._disposed = True
        # The teardown hooks have run; they usually refer back to this handle (a
        # provider's bound method or closure), so drop them to break that cycle.
        self._dispose = None
        self._dispose_now = None
        observer = self._observer
        if observer is not None:
            try:
                observer.disposed()
            except Exception:
                _log.exception("disposing run %s: the runtime's observer failed", self._id)
        listeners, self._disposed_listeners = self._disposed_listeners, None
        for listener in listeners or ():
            try:
                listener()
            except Exception:
                _log.exception("dispose listener %r failed", listener)
        if not self._settled:
            # A provider that forgot to settle on dispose must not leave waiters hanging.
            self.settle(SubagentResult.aborted("run disposed before it settled"))
        self._observer = None
        self._run = None  # the run keeps this handle; the handle lets the run go

    def __repr__(self) -> str:
        return f"<RunHandle {self._provider}:{self._id}>"


class SubagentRun:
    """A started child run: ``id``, ``provider``, ``label``, ``local_agent`` (the child
    agent of in-process providers, else None), awaitable ``result``, ``progress()``,
    ``dispose()``; an async context manager that disposes on exit.
    """

    __slots__ = ("_handle", "id", "label", "provider")

    def __init__(self, handle: RunHandle) -> None:
        self._handle = handle
        self.id = handle.id
        self.provider = handle._provider
        self.label = handle._label

    @property
    def result(self) -> _Result:
        """Awaitable :class:`~dsh.subagent.SubagentResult` (``await run.result``)."""
        return _Result(self._handle)

    @property
    def local_agent(self) -> Agent | None:
        """The child agent of an in-process run, else None (a queued run gets it when
        it starts)."""
        return self._handle._local_agent

    @property
    def settled(self) -> bool:
        """True once the result is in."""
        return self._handle._settled

    @property
    def disposed(self) -> bool:
        """True once :meth:`dispose` has finished."""
        return self._handle._disposed

    def progress(self, *, buffer: int = DEFAULT_PROGRESS_BUFFER) -> ProgressStream:
        """The run's progress items, live, until it settles (see :class:`ProgressStream`)."""
        return ProgressStream(self._handle, buffer)

    def on_settled(self, listener: SettleListener) -> None:
        """Call ``listener(result, error)`` when the run settles (now, if it has)."""
        self._handle.on_settled(listener)

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
            try:
                done = handle._teardown_now()
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
        if handle._disposing is task:
            handle._disposing = None  # (done; the handle is disposed)
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


def handle_of(run: SubagentRun) -> RunHandle:
    """The provider's handle behind ``run`` (the runtime's way from a run to its
    observer port; not for callers, who only read, watch and dispose)."""
    return run._handle
