"""A run's progress: the items a provider emits, their subscribers, the runtime's sink.

:class:`ProgressHub` is the progress half of :class:`~dsh.subagent.RunHandle` (its
base class): nothing is mapped, buffered or routed until someone wants the run's
progress (a :class:`ProgressStream` subscriber, or the runtime's sink for the bus and
the runs above), so a run nobody watches pays for none of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from dsh.subagent._progress import SubagentProgress

__all__ = ["DEFAULT_PROGRESS_BUFFER", "ProgressHub", "ProgressSink", "ProgressStream"]

_log = logging.getLogger("dsh.subagent.run")

DEFAULT_PROGRESS_BUFFER = 1024
"""Items a :meth:`SubagentRun.progress` subscriber may fall behind before the oldest
are dropped."""

ProgressSink = Callable[[Any, SubagentProgress], None]
"""Called with the handle and every item it emits (the runtime's hook: bus and
ancestor runs)."""


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


class ProgressHub:
    """The progress half of a run handle (see the module docstring).

    Subclass hooks: :meth:`_start_progress` (start mapping the transport's updates
    when someone first wants them) and :meth:`_late_items` (what a subscriber that
    arrives after progress was turned on should see first).
    """

    __slots__ = (
        "_id",
        "_progress_off",
        "_progress_source",
        "_settled",
        "_sink",
        "_subs",
        "_wanted",
    )

    def __init__(
        self, id: str, on_progress_wanted: Callable[[Any], Callable[[], None] | None] | None
    ) -> None:
        self._id = id
        self._settled = False
        self._subs: list[_Subscription] | None = None
        self._sink: ProgressSink | None = None
        self._progress_source = on_progress_wanted
        self._progress_off: Callable[[], None] | None = None
        self._wanted = False

    @property
    def wants_progress(self) -> bool:
        """True while someone listens to this run's progress (subscriber or runtime)."""
        return self._wanted

    @property
    def has_subscribers(self) -> bool:
        """True while a :meth:`SubagentRun.progress` iterator is open."""
        return bool(self._subs)

    @property
    def has_sink(self) -> bool:
        """True while the runtime's sink receives this run's items."""
        return self._sink is not None

    def emit(self, item: SubagentProgress) -> None:
        """Report one progress item (no effect once settled or when nobody listens)."""
        if not self._wanted or self._settled:
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
                _log.exception("progress sink of run %s failed", self._id)

    def deliver(self, item: SubagentProgress) -> None:
        """Hand ``item`` to this run's own subscribers only (the runtime forwards
        nested runs' items this way)."""
        if self._settled:
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
        if self._wanted or self._settled:
            return
        self._wanted = True
        try:
            self._progress_off = self._start_progress()
        except Exception:
            _log.exception("starting progress of run %s failed", self._id)
        self._progress_wanted()

    def _start_progress(self) -> Callable[[], None] | None:
        """Start mapping the transport's updates to :meth:`emit` (called once, when
        someone first wants this run's progress); returns what stops it at
        settlement. Default: ``on_progress_wanted``."""
        source = self._progress_source
        if source is None:
            return None
        self._progress_source = None
        return source(self)

    def _progress_wanted(self) -> None:
        """Progress was turned on (once, before settlement): a run handle tells its
        observer, which turns on the progress of the runs below it. Default: nothing."""

    def _late_items(self) -> Iterable[SubagentProgress]:
        """Items a subscriber arriving after progress was turned on gets first."""
        return ()

    def _end_progress(self) -> None:
        """Progress ends at settlement: drop the hooks (they may refer back to this
        handle or its child, and nothing calls them any more); wake the readers."""
        self._sink = None
        self._progress_source = None
        off, self._progress_off = self._progress_off, None
        if off is not None:
            try:
                off()
            except Exception:
                _log.exception("stopping progress of run %s failed", self._id)
        for sub in self._subs or ():
            sub.wake()

    def _subscribe(self, sub: _Subscription) -> None:
        if self._subs is None:
            self._subs = []
        self._subs.append(sub)
        if self._wanted:
            for item in self._late_items():
                sub.push(item)
        else:
            self.want_progress()

    def _unsubscribe(self, sub: _Subscription) -> None:
        if self._subs is not None and sub in self._subs:
            self._subs.remove(sub)
            sub.wake()


class ProgressStream:
    """``async for item in run.progress()``: a run's items until it settles.

    A subscriber that falls behind never slows the child: beyond ``buffer`` items the
    oldest are dropped and counted in :attr:`dropped`. Iteration ends once the run
    has settled and the items emitted before that have been read. ``aclose()`` (or
    leaving an ``async with``) unsubscribes early.
    """

    __slots__ = ("_hub", "_sub")

    def __init__(self, hub: ProgressHub, buffer: int) -> None:
        if buffer < 1:
            raise ValueError(f"progress buffer must hold at least 1 item, got {buffer}")
        self._hub = hub
        self._sub = _Subscription(buffer)
        hub._subscribe(self._sub)

    @property
    def dropped(self) -> int:
        """Items dropped so far because this subscriber fell behind."""
        return self._sub.dropped

    def __aiter__(self) -> ProgressStream:
        return self

    async def __anext__(self) -> SubagentProgress:
        sub = self._sub
        hub = self._hub
        while not sub.buffer:
            subs = hub._subs
            if hub._settled or subs is None or sub not in subs:
                hub._unsubscribe(sub)
                raise StopAsyncIteration
            sub.waiter = asyncio.get_running_loop().create_future()
            try:
                await sub.waiter
            finally:
                sub.waiter = None
        return sub.buffer.popleft()

    async def aclose(self) -> None:
        """Stop receiving items."""
        self._hub._unsubscribe(self._sub)
        self._sub.buffer.clear()

    async def __aenter__(self) -> ProgressStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
