"""Task stores for ``dsh a2a --task-store``: in memory, or a SQL database shared by
several instances (the SDK's versioned database store and its event stream).

* ``memory`` (the default): tasks live in this process.
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

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from a2a.server.cluster import TaskEventStream, VersionedTaskStore
from a2a.server.tasks import InMemoryTaskStore, TaskStore

__all__ = ["OpenedStore", "TaskStoreError", "describe_store_url", "open_task_store"]

_EVENT_POLL = 0.2
"""Seconds between polls of the shared event table by a subscriber on another instance."""


class TaskStoreError(ValueError):
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


async def open_task_store(url: str | None) -> OpenedStore:
    """Open the store ``url`` names (None or ``memory``: in memory); creates the tables."""
    if url is None or url == "memory":
        return OpenedStore(InMemoryTaskStore(), None, "memory", _nothing)
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
