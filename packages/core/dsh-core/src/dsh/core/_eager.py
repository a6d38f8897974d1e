"""An eager task start on Python 3.11, as ``asyncio.Task(..., eager_start=True)`` does on 3.12+.

:func:`eager_task` creates the task, then runs the coroutine's first step at once, *as
that task* (the loop's current task swapped to it for the step, in the task's own copy
of the context variables), so anyio cancel scopes entered in that step belong to the
task that carries the rest of the coroutine. The task's own first step, at the loop's
next iteration, only hands over what the eager step produced: the value, the exception
or what the coroutine waits on. A coroutine that never suspends has therefore finished
when :func:`eager_task` returns, and its caller need not wait a loop iteration for it
(an in-process child whose turn never waits: no event-loop iteration per delegation).
"""

from __future__ import annotations

import asyncio
import contextvars
from asyncio import tasks as _tasks
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["eager_task"]

# asyncio's own (C-accelerated) bookkeeping of the current task, as 3.12's eager start uses
_enter_task = _tasks._enter_task
_leave_task = _tasks._leave_task
_current_tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[Any]]
_current_tasks = _tasks._current_tasks  # type: ignore[attr-defined]  # (not in typeshed)

_RETURNED, _RAISED, _YIELDED = 0, 1, 2


class _Started(Coroutine[Any, Any, Any]):
    """The coroutine a task drives after its first step already ran: the first
    ``send``/``throw`` returns (or raises) that step's outcome, later ones go through."""

    __slots__ = ("_coro", "_kind", "_payload")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self._kind = -1
        self._payload: Any = None

    def _step(self) -> None:
        try:
            self._payload = self._coro.send(None)
            self._kind = _YIELDED
        except StopIteration as stop:
            self._payload = stop.value
            self._kind = _RETURNED
        except BaseException as exc:  # (the task raises it at its own step)
            self._payload = exc
            self._kind = _RAISED

    def _handover(self) -> Any:
        kind, payload = self._kind, self._payload
        self._kind, self._payload = -1, None
        if kind == _RETURNED:
            raise StopIteration(payload)
        if kind == _RAISED:
            raise payload
        return payload

    def send(self, value: Any) -> Any:
        """The first step's outcome the first time, then the coroutine's ``send``."""
        if self._kind >= 0:
            return self._handover()
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """A coroutine that already finished finishes (too late to cancel it); one
        that waits gets the exception where it waits."""
        if self._kind == _RETURNED or self._kind == _RAISED:
            return self._handover()
        self._kind, self._payload = -1, None
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)  # pragma: no cover (asyncio passes one)

    def close(self) -> None:
        """Close the coroutine."""
        self._kind, self._payload = -1, None
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()  # pragma: no cover (a task never awaits it)

    # what inspect.getcoroutinestate and task reprs read
    @property
    def cr_frame(self) -> Any:
        """The coroutine's frame."""
        return getattr(self._coro, "cr_frame", None)

    @property
    def cr_running(self) -> bool:
        """True while the coroutine runs."""
        return bool(getattr(self._coro, "cr_running", False))

    @property
    def cr_await(self) -> Any:
        """What the coroutine awaits."""
        return getattr(self._coro, "cr_await", None)

    @property
    def cr_code(self) -> Any:
        """The coroutine's code."""
        return getattr(self._coro, "cr_code", None)


def eager_task(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]
) -> tuple[asyncio.Task[Any], bool]:
    """A task for ``coro`` whose first step has run; True when ``coro`` has finished
    in it without an exception (the task then holds only its result)."""
    started = _Started(coro)
    context = contextvars.copy_context()
    task: asyncio.Task[Any] = asyncio.Task(started, loop=loop, context=context)
    previous = _current_tasks.get(loop)
    if previous is not None:
        _leave_task(loop, previous)
    _enter_task(loop, task)
    try:
        context.run(started._step)
    finally:
        _leave_task(loop, task)
        if previous is not None:
            _enter_task(loop, previous)
    return task, started._kind == _RETURNED
