"""Eager starts without a task per start: :class:`EagerStarter` (behind ``Context.start_eager``).

A coroutine started eagerly runs its first step at once, *as a task of its own*: the
loop's current task is swapped, for that step, to a parked *carrier* task (in a copy of
the caller's context variables), so an anyio cancel scope entered in the step belongs to
the task that would carry the rest. A coroutine that finishes in that step (an
in-process child whose turn never waits) needed no task at all: the carrier stays
parked and lends itself to the next start (a start nested in a first step borrows
another: one parked carrier per nesting level). One that suspends is handed over: the
carrier wakes, carries it to its end as that coroutine's own task, and is never lent
again (the next start parks a new one). So a waiter of the coroutine's outcome never carries it,
and cancelling that waiter never cancels it, on every Python from 3.11 (3.12's
``eager_start`` still makes a task per start; this makes one per start that suspends).
"""

from __future__ import annotations

import asyncio
import contextvars
from asyncio import tasks as _tasks
from collections.abc import Callable, Coroutine, Generator
from typing import Any

__all__ = ["SUPPORTED", "EagerStarter"]

# asyncio's hooks for task implementations of their own (what 3.12's eager start does
# with them): make a task the loop's current one, and stop it being that. They are
# private: a Python without them gets plain eager tasks instead (``SUPPORTED`` False).
_Swap = Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None]
_ENTER: _Swap | None = getattr(_tasks, "_enter_task", None)
_LEAVE: _Swap | None = getattr(_tasks, "_leave_task", None)
_current_task = asyncio.current_task
SUPPORTED = _ENTER is not None and _LEAVE is not None
"""This Python has the hooks :class:`EagerStarter` needs (if not, ``Context.start_eager``
makes a task per start, eager where the Python can)."""

_NOTHING: Any = object()


class _Carrier(Coroutine[Any, Any, Any]):
    """What a carrier task runs: parked on its ``wake`` future until a coroutine is
    handed over, then that coroutine (in that coroutine's own context)."""

    __slots__ = ("_context", "_coro", "_first", "task", "wake")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._coro: Coroutine[Any, Any, Any] | None = None
        self._context: contextvars.Context | None = None
        self._first: Any = _NOTHING
        self.wake: asyncio.Future[None] = loop.create_future()
        self.task: asyncio.Task[Any] | None = asyncio.Task(
            self, loop=loop, name="dsh eager carrier"
        )

    def hand_over(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context, first: Any
    ) -> None:
        """Carry ``coro`` on from here: its first step yielded ``first``."""
        self._coro, self._context, self._first = coro, context, first
        if not self.wake.done():
            self.wake.set_result(None)

    def send(self, value: Any) -> Any:
        """Park, hand over what the first step yielded, or step the carried coroutine."""
        coro = self._coro
        if coro is None:
            wake = self.wake
            wake._asyncio_future_blocking = True  # (what ``await wake`` does)
            return wake
        first = self._first
        if first is not _NOTHING:
            self._first = _NOTHING
            return first
        assert self._context is not None
        try:
            return self._context.run(coro.send, value)
        except BaseException:
            self._end()
            raise

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Cancelled while parked: the carrier ends. Carrying: the carried coroutine
        gets the exception where it waits. (No local keeps the exception once it
        propagates: its traceback holds this frame, which would make a cycle.)"""
        exc = typ if val is None else val
        del typ, val, tb
        coro = self._coro
        if coro is None:
            self._end()
            try:
                raise exc
            finally:
                exc = None
        self._first = _NOTHING
        assert self._context is not None
        try:
            return self._context.run(coro.throw, exc)
        except BaseException:
            exc = None
            self._end()
            raise

    def _end(self) -> None:
        # The task ends with this step: let go of it and of the coroutine (the task
        # keeps this object as its coroutine, so holding the task would be a cycle).
        self.task = None
        self._coro = self._context = None

    def close(self) -> None:
        """Close the carried coroutine, if any."""
        coro, self._coro = self._coro, None
        if coro is not None:
            coro.close()

    def __await__(self) -> Generator[Any, None, Any]:  # pragma: no cover (tasks send)
        raise TypeError("a carrier is driven by its task, not awaited")

    @property
    def cr_frame(self) -> Any:
        """The carried coroutine's frame (what ``inspect`` reads)."""
        return getattr(self._coro, "cr_frame", None)

    @property
    def cr_running(self) -> bool:
        """True while the carried coroutine runs."""
        return bool(getattr(self._coro, "cr_running", False))


class EagerStarter:
    """Starts coroutines eagerly on one loop; ``own`` is told of each carrier task (the
    context owns it: cancels it when closing, logs how it failed)."""

    __slots__ = ("_loop", "_own", "_spares")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, own: Callable[[asyncio.Task[Any]], None]
    ) -> None:
        self._loop = loop
        self._own = own
        self._spares: list[_Carrier] = []
        """Parked carriers free to lend (one per level of starts nested in first steps)."""

    def start(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro``'s first step now, as a task of its own; if it suspends, that
        task carries it on. (Its value is dropped, its exception logged by the owner.)"""
        loop = self._loop
        spares = self._spares
        carrier = spares.pop() if spares else None
        if carrier is None or carrier.task is None or carrier.wake.done():
            carrier = _Carrier(loop)  # (none free, or one that ended while parked)
            assert carrier.task is not None
            self._own(carrier.task)
        task = carrier.task
        assert task is not None
        context = contextvars.copy_context()
        enter, leave = _ENTER, _LEAVE
        assert enter is not None, "check SUPPORTED first"
        assert leave is not None, "check SUPPORTED first"
        previous = _current_task(loop)
        if previous is not None:
            leave(loop, previous)
        enter(loop, task)
        try:
            first = context.run(coro.send, None)
        except StopIteration:
            spares.append(carrier)  # finished in its first step: no task was needed
            return
        except (KeyboardInterrupt, SystemExit):
            spares.append(carrier)
            raise
        except BaseException as exc:  # the carrier raises it as the coroutine's task would
            carrier.hand_over(_raise(exc), context, _NOTHING)
            return
        finally:
            leave(loop, task)
            if previous is not None:
                enter(loop, previous)
        carrier.hand_over(coro, context, first)


async def _raise(exc: BaseException) -> None:
    try:
        raise exc
    finally:
        del exc  # (the frame would keep the exception, whose traceback keeps the frame)
