"""The tasks and services of one runtime: the base of :class:`~dsh.core.Context`.

:class:`Container` owns the tasks a context runs (:meth:`Container.spawn`), its close
hooks and the services packages add (``ctx.subagents``, ...): everything of a context
that names no agent. :func:`root_sandbox` and :func:`with_tracing_row` are how
:meth:`~dsh.core.Context.open` reads a preset.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Self, TypeVar

from dsh.core._eager import SUPPORTED as _EAGER_STARTER
from dsh.core._eager import EagerStarter
from dsh.core._effects import Disposer
from dsh.core._plugins import ENTRY_POINT_GROUP
from dsh.core._presets import PluginRow, Preset, PresetError
from dsh.core._sandbox import SANDBOX_ENV, SandboxConfig, SandboxPolicy
from dsh.core._tracing import TRACING_PLUGIN, TRACING_SWITCH_ENV, tracing_switched_on

__all__ = ["SERVICE_ENTRY_POINT_GROUP", "Container", "root_sandbox", "with_tracing_row"]

SERVICE_ENTRY_POINT_GROUP = "dsh.services"
"""Entry points that install a context service on first access (``ctx.<name>``)."""

T = TypeVar("T")

_log = logging.getLogger("dsh.core._context")
_EAGER_START = sys.version_info >= (3, 12)
"""``asyncio.Task(..., eager_start=True)`` exists (Python 3.12+)."""


@functools.cache
def _declared_services() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=SERVICE_ENTRY_POINT_GROUP)}


class Container:
    """The tasks, close hooks and services of one runtime (the base of
    :class:`~dsh.core.Context`)."""

    def __init__(self) -> None:
        self._services: dict[str, Any] = {}
        self._closers: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self._tasks: set[asyncio.Task[Any]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starter: EagerStarter | None = None
        self._deferred: dict[object, Callable[[], object]] | None = None

    def on_close(self, closer: Callable[[], Coroutine[Any, Any, None]]) -> Disposer:
        """Run ``await closer()`` when the context closes, before agents are closed.

        Services that own live work (e.g. the subagent runtime's runs) drain here.
        """
        self._closers.append(closer)

        def remove() -> None:
            if closer in self._closers:
                self._closers.remove(closer)

        return remove

    async def _run_closers(self) -> None:
        """Run the close hooks, newest first (a failure is logged)."""
        while self._closers:
            closer = self._closers.pop()
            try:
                await closer()
            except Exception:
                _log.exception("close hook %r failed", closer)

    # -- tasks --------------------------------------------------------------------

    def _start_tasks(self) -> None:
        """Own tasks from now on, on the running loop (``RuntimeError`` off asyncio)."""
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("dsh runs on asyncio (anyio's asyncio backend)") from None
        self._tasks = set()

    def spawn(
        self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, eager: bool = False
    ) -> asyncio.Task[Any]:
        """Run ``fn(*args)`` as a task owned by this context.

        The context cancels and awaits every task it still owns when it closes, so no
        task outlives it. (Native asyncio tasks: anyio's ``start_soon`` costs ~5x more
        on the delegation hot path; anyio cancel scopes work inside them as usual.)
        ``eager``: on Python 3.12+ (and with no custom task factory) the task's first
        step runs at once, so a coroutine that never suspends is done on return.
        """
        tasks, loop = self._tasks, self._loop
        if tasks is None or loop is None:
            raise RuntimeError(
                "this context is not open: use `async with Context.open(...) as ctx`"
            )
        if eager and _EAGER_START and loop.get_task_factory() is None:
            task = asyncio.Task(fn(*args), loop=loop, eager_start=True)  # type: ignore[call-arg]
            if task.done():
                self._task_done(task)
                return task
        else:
            task = loop.create_task(fn(*args))
        tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def start_eager(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``fn(*args)`` in a task of its own that this context owns, its first step
        at once (on every Python): a coroutine that never suspends has finished on
        return, and no task was made for it (see :mod:`dsh.core._eager`), so none is
        returned. Its value is dropped; a failure is logged. Under a custom task
        factory it is ``spawn(fn, *args, eager=True)`` (the factory sees every task).
        """
        loop = self._loop
        if loop is None or self._tasks is None:
            raise RuntimeError(
                "this context is not open: use `async with Context.open(...) as ctx`"
            )
        if not _EAGER_STARTER or loop.get_task_factory() is not None:
            self.spawn(fn, *args, eager=True)
            return
        starter = self._starter
        if starter is None:
            starter = self._starter = EagerStarter(loop, self._own)
        starter.start(fn(*args))

    def defer(self, key: object, callback: Callable[[], object]) -> None:
        """Run ``callback()`` at the loop's next iteration unless ``undefer(key)`` comes
        first (one loop callback for all deferred in an iteration; dropped at once)."""
        deferred = self._deferred
        if deferred is None:
            if self._loop is None:
                raise RuntimeError(
                    "this context is not open: use `async with Context.open(...) as ctx`"
                )
            deferred = self._deferred = {}
            self._loop.call_soon(self._run_deferred)
        deferred[key] = callback

    def undefer(self, key: object) -> None:
        """Forget what :meth:`defer` keeps under ``key`` (if it has not run yet)."""
        if self._deferred is not None:
            self._deferred.pop(key, None)

    def _run_deferred(self) -> None:
        deferred, self._deferred = self._deferred, None
        for callback in (deferred or {}).values():
            try:
                callback()
            except Exception:
                _log.exception("deferred callback %r failed", callback)

    def _own(self, task: asyncio.Task[Any]) -> None:
        if self._tasks is not None:
            self._tasks.add(task)
            task.add_done_callback(self._task_done)

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback()`` on the context's loop at its next iteration."""
        if self._loop is None:
            raise RuntimeError(
                "this context is not open: use `async with Context.open(...) as ctx`"
            )
        self._loop.call_soon(callback)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if self._tasks is not None:
            self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("context task %r failed", task, exc_info=task.exception())

    async def _cancel_tasks(self) -> None:
        self._starter = None
        tasks = self._tasks or set()
        while tasks:
            pending = list(tasks)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            tasks.difference_update(pending)
        self._tasks = None

    # -- services -----------------------------------------------------------------

    def provide(self, name: str, service: object) -> Disposer:
        """Expose ``service`` as ``ctx.<name>``; a clash raises ``ValueError``."""
        if (
            name in self._services
            or any(name in klass.__dict__ for klass in type(self).__mro__[:-1])
            or name in self.__dict__
        ):
            raise ValueError(f'the context already has a service named "{name}"')
        self._services[name] = service

        def remove() -> None:
            if self._services.get(name) is service:
                del self._services[name]

        return remove

    def service(self, name: str, kind: type[T]) -> T:
        """The service ``name``, checked to be a ``kind`` (typed access).

        A service not provided yet is installed from the ``dsh.services`` entry point
        of that name, if an installed distribution declares one."""
        found = self._services.get(name)
        if found is None:
            found = self._install_declared(name)
        if found is None:
            raise LookupError(
                f'no service "{name}" in this context: install or load the package that provides it'
            )
        if not isinstance(found, kind):
            raise TypeError(f'service "{name}" is a {type(found).__name__}, not a {kind.__name__}')
        return found

    def ensure_service(self, name: str, kind: type[T], factory: Callable[[Self], T]) -> T:
        """The service ``name``; created with ``factory(ctx)`` and provided on first use.

        How a package installs its service once per context (the factory registers
        whatever close hook the service needs)."""
        found = self._services.get(name)
        if found is None:
            found = factory(self)
            self.provide(name, found)
        if not isinstance(found, kind):
            raise TypeError(f'service "{name}" is a {type(found).__name__}, not a {kind.__name__}')
        return found

    def has_service(self, name: str) -> bool:
        """True if ``name`` is provided (declared but not yet installed services: False)."""
        return name in self._services

    def _install_declared(self, name: str) -> Any:
        """Install the service a ``dsh.services`` entry point declares under ``name``.

        The entry point names a callable taking the context and returning the
        service (it installs itself with :meth:`ensure_service`)."""
        entry = _declared_services().get(name)
        if entry is None:
            return None
        install = entry.load()
        service = install(self)
        return self._services.get(name, service)

    def __getattr__(self, name: str) -> Any:
        services = self.__dict__.get("_services")
        if services is None or name.startswith("_"):
            raise AttributeError(name)
        if name in services:
            return services[name]
        found = self._install_declared(name)
        if found is not None:
            return found
        raise AttributeError(
            f'no service "{name}" in this context: install or load the package that provides it'
        )


def root_sandbox(preset: Preset | None, config: SandboxConfig | None = None) -> SandboxPolicy:
    """The root sandbox policy for ``preset`` (``config`` replaces its ``[sandbox]``
    table), under the ceiling a parent process passed in :data:`SANDBOX_ENV`."""
    table = config if config is not None else preset.sandbox if preset is not None else None
    policy = SandboxPolicy.from_config(table, protected=preset.files if preset else ())
    inherited = os.environ.get(SANDBOX_ENV)
    if inherited:
        policy = SandboxPolicy.from_json(inherited).narrowed(policy, strict=False)
    return policy


def with_tracing_row(
    rows: list[tuple[int, PluginRow]], next_index: int
) -> list[tuple[int, PluginRow]]:
    """``rows`` with a ``dsh-otel`` row at the end when tracing is switched on and no
    enabled row loads it. :class:`~dsh.core.PresetError` when dsh-otel is not installed."""
    if not tracing_switched_on() or any(row.name == TRACING_PLUGIN for _, row in rows):
        return rows
    if not entry_points(group=ENTRY_POINT_GROUP, name=TRACING_PLUGIN):
        raise PresetError(
            f"{TRACING_SWITCH_ENV}=1 (or --otel) turns tracing on, which needs the dsh-otel"
            " package: pip install 'dsh-otel[sdk]' (or unset the variable)"
        )
    return [*rows, (next_index, PluginRow(id="otel-switch", name=TRACING_PLUGIN))]
