"""The context: the typed service container every plugin and agent shares.

Open one with :meth:`Context.open`; it owns the task group in which agents run
their turns, so when the ``async with`` block exits every agent is closed, every
plugin unloaded and no task is left::

    async with Context.open(load_preset("dsh.toml")) as ctx:
        agent = ctx.agents.create()
        outcome = await agent.run("hello")

Services that packages add (``ctx.subagents`` from ``dsh-subagent``, ...) are
registered with :meth:`Context.provide` and read as attributes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, TypeVar

import anyio

from dsh.core._agents import AgentRegistry
from dsh.core._effects import Disposer
from dsh.core._env_model import NO_MODEL_HELP, EnvModel, NoModelError, model_from_env
from dsh.core._events import EventBus
from dsh.core._gc import tune_gc
from dsh.core._jobs import JobRegistry
from dsh.core._llm import BoundModel, LLMRuntime, ModelConfigError
from dsh.core._permission_config import PermissionsConfig
from dsh.core._permissions import Permissions
from dsh.core._plugins import ENTRY_POINT_GROUP, PluginHost
from dsh.core._presets import AgentDefaults, PluginRow, Preset, PresetError
from dsh.core._prompt import PromptSections
from dsh.core._sandbox import SANDBOX_ENV, SandboxConfig, SandboxPolicy
from dsh.core._scripted import scripted_factory
from dsh.core._session import SessionStore
from dsh.core._tools import ToolRegistry
from dsh.core._tracing import (
    NO_TRACING,
    TRACING_PLUGIN,
    TRACING_SWITCH_ENV,
    Tracing,
    tracing_switched_on,
)

__all__ = ["SERVICE_ENTRY_POINT_GROUP", "Context", "root_sandbox"]

SERVICE_ENTRY_POINT_GROUP = "dsh.services"
"""Entry points that install a context service on first access (``ctx.<name>``)."""

T = TypeVar("T")

_log = logging.getLogger("dsh.core._context")
_EAGER_START = sys.version_info >= (3, 12)
"""``asyncio.Task(..., eager_start=True)`` exists (Python 3.12+)."""


@functools.cache
def _declared_services() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=SERVICE_ENTRY_POINT_GROUP)}


class Context:
    """Services shared by everything in one dsh runtime.

    ``events`` (the bus), ``tools``, ``llm``, ``agents``, ``jobs``, ``plugins``,
    ``permissions`` (who may run which tool),
    ``tracing`` (the tracing seam, a no-op by default),
    ``sandbox`` (the root :class:`~dsh.core.SandboxPolicy` every agent narrows),
    ``sessions`` (a store, or None for in-memory sessions), ``cwd``, ``defaults``
    and ``prompt`` (the deployment's system-prompt sections, copied into each new
    agent); plus whatever plugins :meth:`provide`.
    """

    def __init__(
        self,
        *,
        defaults: AgentDefaults | None = None,
        cwd: str | os.PathLike[str] | None = None,
        sessions_dir: str | os.PathLike[str] | None = None,
        permissions: PermissionsConfig | None = None,
        sandbox: SandboxPolicy | None = None,
    ) -> None:
        self.defaults = defaults or AgentDefaults()
        self.sandbox = sandbox if sandbox is not None else root_sandbox(None)
        """The root sandbox policy: what every agent's tool processes may at most do."""
        self.cwd = str(Path(cwd or self.defaults.cwd or os.getcwd()).resolve())
        directory = sessions_dir or self.defaults.sessions_dir
        self.sessions: SessionStore | None = SessionStore(directory) if directory else None
        self.events = EventBus()
        self.tools = ToolRegistry()
        self.llm = LLMRuntime()
        self.llm.register_adapter("scripted", scripted_factory)
        self.agents = AgentRegistry(self)
        self.jobs = JobRegistry(self)
        self.plugins = PluginHost(self)
        self.prompt = PromptSections()
        self.prompt.set("persona", self.defaults.persona)
        self.permissions = Permissions(self, permissions)
        self.tracing: Tracing = NO_TRACING
        """The tracing seam: traces nothing until a tracing plugin installs one
        (:func:`~dsh.core.install_tracing`)."""
        self._services: dict[str, Any] = {}
        self._closers: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self._tasks: set[asyncio.Task[Any]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._default_model: BoundModel | None = None
        self.closing = False
        """True once :meth:`aclose` has started: runtime notices are no longer delivered."""

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        preset: Preset | None = None,
        *,
        cwd: str | os.PathLike[str] | None = None,
        sessions_dir: str | os.PathLike[str] | None = None,
        sandbox: SandboxConfig | None = None,
    ) -> AsyncIterator[Context]:
        """Open a context, load the preset's enabled rows, and tear it all down on exit.

        The root sandbox policy is the preset's ``[sandbox]`` table (``sandbox``
        replaces it), narrowed by the policy a parent dsh process passed down
        (:data:`~dsh.core.SANDBOX_ENV`); the preset's own files are protected.

        Agents created without a model use the preset's ``[agent.model]``, else the model
        the environment names, as ``dsh run`` does (:meth:`default_model`).

        The first open in a process also makes the garbage collector's full
        collections rarer (:func:`~dsh.core.tune_gc`; ``DSH_GC_TUNING=off`` keeps
        CPython's schedule)."""
        tune_gc()
        ctx = cls(
            defaults=preset.agent if preset is not None else None,
            cwd=cwd,
            sessions_dir=sessions_dir,
            permissions=preset.permissions if preset is not None else None,
            sandbox=root_sandbox(preset, sandbox),
        )
        try:
            ctx._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("dsh runs on asyncio (anyio's asyncio backend)") from None
        ctx._tasks = set()
        try:
            if preset is not None:  # DSH_OTEL=1 adds dsh-otel (_with_tracing_row)
                rows = _with_tracing_row(preset.enabled_rows(), len(preset.plugin))
                await ctx.plugins.load_rows(rows)
            yield ctx
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await ctx.aclose()
                finally:
                    await ctx._cancel_tasks()

    def on_close(self, closer: Callable[[], Coroutine[Any, Any, None]]) -> Disposer:
        """Run ``await closer()`` when the context closes, before agents are closed.

        Services that own live work (e.g. the subagent runtime's runs) drain here.
        """
        self._closers.append(closer)

        def remove() -> None:
            if closer in self._closers:
                self._closers.remove(closer)

        return remove

    async def aclose(self) -> None:
        """Run close hooks (newest first), kill jobs, close agents, unload plugins."""
        self.closing = True
        while self._closers:
            closer = self._closers.pop()
            try:
                await closer()
            except Exception:
                _log.exception("close hook %r failed", closer)
        await self.jobs.aclose()
        await self.agents.aclose_all()
        await self.plugins.unload_all()

    # -- tasks --------------------------------------------------------------------

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
        if name in self._services or name in type(self).__dict__ or name in self.__dict__:
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

    def ensure_service(self, name: str, kind: type[T], factory: Callable[[Context], T]) -> T:
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

    # -- models -------------------------------------------------------------------

    def default_model(self) -> BoundModel:
        """The model of agents created without one: ``[agent.model]``, else the one the
        environment names (:func:`~dsh.core.model_from_env`: ``OPENAI_BASE_URL``,
        ``DEEPSEEK_API_KEY`` or ``OPENAI_API_KEY``, as ``dsh run`` takes it). Raises
        :class:`~dsh.core.NoModelError` saying what to set when neither names one, a
        :class:`~dsh.core.ModelConfigError` when its adapter is not loaded."""
        if self._default_model is None:
            config = self.defaults.model
            found: EnvModel | None = None
            if config is None:
                found = model_from_env()
                if found is None:
                    raise NoModelError(NO_MODEL_HELP)
                config = found.config
            try:
                self._default_model = self.llm.bind(config)
            except ModelConfigError as exc:
                if found is None:
                    raise
                raise ModelConfigError(
                    f"the model from the environment ({found.reason}): {exc}"
                ) from exc
        return self._default_model


def root_sandbox(preset: Preset | None, config: SandboxConfig | None = None) -> SandboxPolicy:
    """The root sandbox policy for ``preset`` (``config`` replaces its ``[sandbox]``
    table), under the ceiling a parent process passed in :data:`SANDBOX_ENV`."""
    table = config if config is not None else preset.sandbox if preset is not None else None
    policy = SandboxPolicy.from_config(table, protected=preset.files if preset else ())
    inherited = os.environ.get(SANDBOX_ENV)
    if inherited:
        policy = SandboxPolicy.from_json(inherited).narrowed(policy, strict=False)
    return policy


def _with_tracing_row(
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
