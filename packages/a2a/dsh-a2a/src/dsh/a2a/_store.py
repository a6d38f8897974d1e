"""Task stores for ``dsh a2a --task-store``: in memory, or a SQL database shared by
several instances (the SDK's versioned database store and its event stream).

* ``memory`` (the default): tasks live in this process, in a
  :class:`BoundedMemoryTaskStore`: finished tasks are evicted by age and count.
* ``sqlite:///path/to/tasks.db``: a SQLite file (``pip install 'dsh-a2a[sqlite]'``),
  opened in WAL mode; fine for instances on one machine.
* ``postgresql://user:password@host/db`` (or ``postgres://``, or an explicit
  SQLAlchemy async URL such as ``postgresql+asyncpg://...``):
  ``pip install 'dsh-a2a[postgresql]'``; for instances on several machines.

With a database, every instance reads and writes the same tasks: ``GetTask`` and
``CancelTask`` work on any instance, and ``SubscribeToTask`` on one instance follows a
task running on another (through the shared event table).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from a2a.auth.user import User
from a2a.server.cluster import TaskEventStream, VersionedTaskStore
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState

from dsh.core import DshError

__all__ = [
    "BoundedMemoryTaskStore",
    "OpenedStore",
    "TaskStoreError",
    "describe_store_url",
    "open_task_store",
]

_EVENT_POLL = 0.2
"""Seconds between polls of the shared event table by a subscriber on another instance."""


class TaskStoreError(DshError, ValueError):
    """A ``--task-store`` value that cannot be used (the message says why)."""


@dataclass
class OpenedStore:
    """A task store ready for the request handler, and how to release it."""

    store: TaskStore | VersionedTaskStore
    event_stream: TaskEventStream | None
    description: str
    close: Callable[[], Awaitable[None]]

    @property
    def shared(self) -> bool:
        """True for a database several instances can share."""
        return self.event_stream is not None


def _async_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise TaskStoreError(
            f"--task-store {describe_store_url(url)!r}: expected memory, sqlite:///PATH or"
            " postgresql://USER:PASSWORD@HOST/DB"
        )
    scheme = scheme.lower()
    if scheme == "sqlite":
        return f"sqlite+aiosqlite://{rest}"
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+asyncpg://{rest}"
    if scheme in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        return f"{scheme}://{rest}"
    raise TaskStoreError(
        f"--task-store: unsupported database {scheme!r} (use sqlite:///PATH or postgresql://...)"
    )


def describe_store_url(url: str) -> str:
    """``url`` with any password hidden (for messages and logs)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    credentials, at, host = rest.rpartition("@")
    if not at:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


_FINISHED = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
    }
)


class _Owner(User):
    """The user whose tasks a store operation concerns (for deleting an evicted task)."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return bool(self._name)

    @property
    def user_name(self) -> str:
        return self._name


class BoundedMemoryTaskStore(TaskStore):
    """The SDK's in-memory task store, holding at most ``max_tasks`` tasks and no
    finished task older than ``ttl`` seconds.

    A task is finished once saved in a terminal state (completed, canceled, failed,
    rejected). Eviction runs on every store operation: finished tasks older than
    ``ttl`` go, then the oldest finished ones while more than ``max_tasks`` are kept.
    Running tasks are never evicted (so more than ``max_tasks`` can be kept while
    that many run). An evicted task is gone: ``GetTask`` answers task-not-found.
    Tasks are kept per owner (the caller's token name) like the SDK's store.
    """

    def __init__(
        self,
        *,
        max_tasks: int = 1000,
        ttl: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_tasks < 1 or not ttl > 0:
            raise ValueError(f"max_tasks must be at least 1 and ttl positive: {max_tasks}, {ttl}")
        self._inner = InMemoryTaskStore()
        self._max = max_tasks
        self._ttl = ttl
        self._clock = clock
        self._kept: set[tuple[str, str]] = set()
        self._finished: OrderedDict[tuple[str, str], float] = OrderedDict()
        """Finished tasks (owner, task id) in the order they finished, with when."""

    @property
    def size(self) -> int:
        """Tasks kept now."""
        return len(self._kept)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Save ``task``; a task saved in a terminal state starts its time to live."""
        key = (resolve_user_scope(context), task.id)
        await self._inner.save(task, context)
        self._kept.add(key)
        if task.status.state in _FINISHED:
            self._finished.setdefault(key, self._clock())
        else:
            self._finished.pop(key, None)
        await self._evict()

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task, unless it is unknown or evicted."""
        await self._evict()
        return await self._inner.get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The caller's tasks still kept."""
        await self._evict()
        return await self._inner.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Forget a task."""
        key = (resolve_user_scope(context), task_id)
        self._kept.discard(key)
        self._finished.pop(key, None)
        await self._inner.delete(task_id, context)

    async def _evict(self) -> None:
        limit = self._clock() - self._ttl
        doomed: list[tuple[str, str]] = []
        for key, finished in self._finished.items():
            if finished < limit or len(self._kept) - len(doomed) > self._max:
                doomed.append(key)
            else:
                break
        for owner, task_id in doomed:
            await self.delete(task_id, ServerCallContext(user=_Owner(owner)))


async def open_task_store(
    url: str | None, *, max_tasks: int = 1000, ttl: float = 3600.0
) -> OpenedStore:
    """Open the store ``url`` names (None or ``memory``: a :class:`BoundedMemoryTaskStore`
    with ``max_tasks`` and ``ttl``); creates the tables of a database."""
    if url is None or url == "memory":
        memory = BoundedMemoryTaskStore(max_tasks=max_tasks, ttl=ttl)
        return OpenedStore(memory, None, "memory", _nothing)
    target = _async_url(url)
    driver = "aiosqlite" if target.startswith("sqlite") else "asyncpg"
    extra = "sqlite" if driver == "aiosqlite" else "postgresql"
    try:
        from a2a.server.cluster import DatabaseTaskEventStream, VersionedDatabaseTaskStore
        from sqlalchemy import event
        from sqlalchemy.ext.asyncio import create_async_engine

        __import__(driver)
    except ImportError as exc:
        raise TaskStoreError(
            f"--task-store {describe_store_url(url)}: the database driver is not installed"
            f" ({exc}); install it with: pip install 'dsh-a2a[{extra}]'"
        ) from None
    kwargs: dict[str, Any] = {}
    if driver == "aiosqlite":
        kwargs["connect_args"] = {"timeout": 30}
    engine = create_async_engine(target, **kwargs)
    if driver == "aiosqlite":

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(connection: Any, _record: Any) -> None:
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

    store = VersionedDatabaseTaskStore(engine)
    stream = DatabaseTaskEventStream(engine, poll_interval_s=_EVENT_POLL)
    try:
        await store.initialize()
        await stream.initialize()
    except Exception as exc:
        await engine.dispose()
        raise TaskStoreError(
            f"--task-store {describe_store_url(url)}: cannot open the database:"
            f" {type(exc).__name__}: {exc}"
        ) from None
    return OpenedStore(store, stream, describe_store_url(url), engine.dispose)


async def _nothing() -> None:
    return None
