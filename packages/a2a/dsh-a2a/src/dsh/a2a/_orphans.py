"""Tasks whose caller is gone: ``dsh a2a`` cancels them after a grace period.

A task is *followed* by the requests that wait for it: the streaming request that
started it (``SendStreamingMessage``; ``message/stream`` in A2A 0.3; REST
``message:stream``), a blocking send (``SendMessage`` without ``returnImmediately``;
0.3: ``configuration.blocking`` not false), and every ``SubscribeToTask`` (0.3:
``tasks/resubscribe``). When the last follower's connection closes while the task
still runs (the caller crashed, was killed, lost its network), the task is orphaned:
unless someone subscribes to it again within ``grace`` seconds (``--orphan-grace``),
its turn is cancelled; the task ends ``canceled`` and its tools' processes and
delegations end with it.

A *background* task, started by a send that returns at once (``returnImmediately =
true``; 0.3: ``configuration.blocking = false``), has no follower to lose: it runs to
its end whoever listens (``GetTask`` polls it, ``SubscribeToTask`` follows it, and a
subscriber that goes away does not cancel it either).

With a task store shared by several instances, only the followers on the instance
running the task count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Protocol

from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.types import (
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)

from dsh.a2a._auth import RedactingContextBuilder

__all__ = [
    "DISCONNECTED_KEY",
    "TASK_KEY",
    "Followers",
    "FollowingContextBuilder",
    "FollowingRequestHandler",
]

_log = logging.getLogger("dsh.a2a")

DISCONNECTED_KEY = "dsh.a2a.disconnected"
"""Call-context state: an async callable, True once the request's client is gone."""
TASK_KEY = "dsh.a2a.task"
"""Call-context state: the id of the task the request started (set by the executor)."""

_CHECK = 0.25
"""Seconds between checks of a blocking send's connection."""


class TaskCanceller(Protocol):
    """What :class:`Followers` needs of the executor."""

    def is_running(self, task_id: str) -> bool:
        """True while the task's turn runs here."""
        ...

    def cancel_task(self, task_id: str, cause: str) -> bool:
        """Cancel the task's turn (False: it does not run here)."""
        ...


class Followers:
    """Counts who follows each running task; cancels a task left alone for ``grace``
    seconds (see the module docstring)."""

    def __init__(self, tasks: TaskCanceller, grace: float) -> None:
        self._tasks = tasks
        self._grace = grace
        self._count: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._background: set[str] = set()

    @property
    def orphans(self) -> int:
        """Tasks waiting out their grace period now."""
        return len(self._timers)

    def background(self, task_id: str) -> None:
        """Mark a task started by a non-blocking send: never cancelled for lack of
        followers."""
        self._background = {t for t in self._background if self._tasks.is_running(t)}
        self._background.add(task_id)
        self._stop_timer(task_id)

    def follow(self, task_id: str) -> None:
        """One more request follows ``task_id`` (a pending cancel is called off)."""
        self._count[task_id] = self._count.get(task_id, 0) + 1
        self._stop_timer(task_id)

    def leave(self, task_id: str) -> None:
        """A request following ``task_id`` ended or lost its client."""
        left = self._count.get(task_id, 0) - 1
        if left > 0:
            self._count[task_id] = left
            return
        self._count.pop(task_id, None)
        if not self._tasks.is_running(task_id):
            self._background.discard(task_id)
            return
        if task_id in self._background:
            return
        _log.info("task %s: its last follower went away; cancelling in %g s", task_id, self._grace)
        self._stop_timer(task_id)
        loop = asyncio.get_running_loop()
        self._timers[task_id] = loop.call_later(self._grace, self._expire, task_id)

    def close(self) -> None:
        """Call off every pending cancel (shutdown cancels everything anyway)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def _stop_timer(self, task_id: str) -> None:
        timer = self._timers.pop(task_id, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, task_id: str) -> None:
        self._timers.pop(task_id, None)
        if self._count.get(task_id) or task_id in self._background:
            return
        cause = (
            f"the caller went away: nobody followed the task for {self._grace:g} s"
            " (dsh a2a --orphan-grace)"
        )
        if self._tasks.cancel_task(task_id, cause):
            _log.warning("task %s: cancelled, %s", task_id, cause)


class FollowingContextBuilder(RedactingContextBuilder):
    """The call context (without the ``Authorization`` header), with a way to ask
    whether the request's client is still connected (:data:`DISCONNECTED_KEY`)."""

    def build(self, request: Any) -> ServerCallContext:
        """The SDK's call context for ``request``."""
        context = super().build(request)
        context.state[DISCONNECTED_KEY] = request.is_disconnected
        return context


class FollowingRequestHandler(DefaultRequestHandler):
    """The SDK's request handler, telling :class:`Followers` who follows which task."""

    def __init__(self, *args: Any, followers: Followers, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.followers = followers

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Any:
        """A send: a background task (non-blocking), or followed until it answers."""
        if params.configuration.return_immediately:
            result = await super().on_message_send(params, context)
            if isinstance(result, Task):
                self.followers.background(result.id)
            return result
        disconnected: Callable[[], Awaitable[bool]] | None = context.state.get(DISCONNECTED_KEY)
        send = asyncio.ensure_future(super().on_message_send(params, context))
        if disconnected is None:
            return await send
        followed: str | None = None
        try:
            while True:
                done, _ = await asyncio.wait({send}, timeout=_CHECK)
                if done:
                    return send.result()
                if followed is None:
                    task_id = context.state.get(TASK_KEY)
                    if isinstance(task_id, str):
                        followed = task_id
                        self.followers.follow(task_id)
                if followed is not None and await disconnected():
                    break
            self.followers.leave(followed)
            followed = None
            return await send  # for nobody: ends when the task does
        finally:
            if followed is not None:
                self.followers.leave(followed)
            if not send.done():
                send.cancel()

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """A streaming send: its task is followed while the stream is open."""
        async for event in self._followed(super().on_message_send_stream(params, context), None):
            yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """A subscription: the task is followed while it is open."""
        async for event in self._followed(super().on_subscribe_to_task(params, context), params.id):
            yield event

    async def _followed(
        self, events: AsyncGenerator[Event, None], task_id: str | None
    ) -> AsyncGenerator[Event, None]:
        followed: str | None = None
        try:
            if task_id:
                self.followers.follow(task_id)
                followed = task_id
            async with contextlib.aclosing(events):
                async for event in events:
                    if followed is None:
                        found = _task_id(event)
                        if found:
                            self.followers.follow(found)
                            followed = found
                    yield event
        finally:
            if followed is not None:
                self.followers.leave(followed)


def _task_id(event: Event) -> str | None:
    if isinstance(event, Task):
        return event.id or None
    if isinstance(event, TaskStatusUpdateEvent | TaskArtifactUpdateEvent | Message):
        return event.task_id or None
    return None
