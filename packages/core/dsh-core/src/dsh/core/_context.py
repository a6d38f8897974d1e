"""The context: the typed service container every plugin and agent shares.

Open one with :meth:`Context.open`; it owns the task group in which agents run
their turns, so when the ``async with`` block exits every agent is closed, every
plugin unloaded and no task is left::

    async with Context.open(load_preset("dsh.toml")) as ctx:
        agent = ctx.agents.create()
        outcome = await agent.run("hello")

Services that packages add (``ctx.subagents`` from ``dsh-subagent``, ...) are
registered with :meth:`Context.provide` and read as attributes.

This is the top of the core: the public types that name the context or each other
(:class:`Agent` has its ``ctx``, the context its ``agents``, its ``tracing`` and its
``permissions``, whose hooks and requests name the agent) are declared here, on
logic below that knows them only through small protocols: :class:`~dsh.core._agent.AgentCore`
(an agent's lifecycle), :class:`~dsh.core._agents.LiveAgents` (the registry),
:class:`~dsh.core._permissions.PermissionGate` (the policy) and
:class:`~dsh.core._container.Container` (tasks and services).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread

from dsh.core._agent import AgentCore
from dsh.core._agents import LiveAgents
from dsh.core._container import Container, root_sandbox, with_tracing_row
from dsh.core._effects import Disposer
from dsh.core._env_model import NO_MODEL_HELP, EnvModel, NoModelError, model_from_env
from dsh.core._errors import ConfigError
from dsh.core._events import EventBus
from dsh.core._gc import tune_gc
from dsh.core._jobs import JobRegistry
from dsh.core._llm import BoundModel, LLMRuntime, ModelConfigError, ModelRequest, ToolCall
from dsh.core._permission_config import PermissionDecision, PermissionsConfig
from dsh.core._permissions import PermissionGate
from dsh.core._plugins import PluginHost
from dsh.core._presets import AgentDefaults, Preset
from dsh.core._prompt import PromptSections
from dsh.core._sandbox import SandboxConfig, SandboxPolicy
from dsh.core._scripted import scripted_factory
from dsh.core._session import Session, SessionStore
from dsh.core._signals import AbortSignal
from dsh.core._tool_tape import ToolTape, start_recorder
from dsh.core._tools import AgentTools, Tool, ToolRegistry
from dsh.core._tracing import NO_CALL, NO_CONTEXT, TracedCall

__all__ = [
    "NO_TRACING",
    "Agent",
    "AgentRegistry",
    "Approver",
    "Context",
    "PermissionRequest",
    "Permissions",
    "ToolContext",
    "Tracing",
    "TracingHost",
    "install_tracing",
]


class Agent(AgentCore):
    """One agent: a session, a model, a system prompt and the tools it may use."""

    __slots__ = ()

    ctx: Context
    """The context the agent runs in."""

    def _tool_context(self, call_id: str, signal: AbortSignal) -> ToolContext:
        return ToolContext(self, call_id, signal)

    def _trace_turn(self, turn: int) -> TracedCall:
        return self.ctx.tracing.turn(self, turn)

    def _trace_model_call(self, request: ModelRequest) -> TracedCall:
        return self.ctx.tracing.model_call(self, request)

    def _trace_tool_call(self, call: ToolCall) -> TracedCall:
        return self.ctx.tracing.tool_call(self, call)


@dataclass(slots=True)
class ToolContext:
    """What a running tool call can see: its agent, call id and abort signal."""

    agent: Agent
    call_id: str
    signal: AbortSignal

    async def check_permission(self, tool: Tool, arguments: Any) -> PermissionDecision:
        """Whether the agent's context lets it run the governed ``tool`` with
        ``arguments`` (:meth:`~dsh.core.Permissions.check`; :meth:`Tool.invoke` asks)."""
        agent = self.agent
        return await agent.ctx.permissions.check(tool, arguments, agent, self.call_id)


class AgentRegistry(LiveAgents[Agent]):
    """Creates agents and tracks the live ones (``ctx.agents``)."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._context = ctx

    def _new_agent(
        self,
        session: Session,
        model: BoundModel,
        prompt: PromptSections,
        tools: AgentTools,
        *,
        parent_id: str | None,
        label: str | None,
        max_steps: int,
        sandbox: SandboxPolicy,
        cut_off: bool = False,
    ) -> Agent:
        # (positional: on Python 3.11 a class called with keywords builds a dict of them,
        # and this runs once per agent, on the delegation path)
        return Agent(
            self._context,
            session,
            model,
            prompt,
            tools,
            parent_id,
            label,
            max_steps,
            sandbox,
            self._forget,
            cut_off,
        )


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """A tool call waiting for a decision."""

    tool: str
    kind: str
    """What the tool does, in ACP's words: read, edit, delete, move, search, execute,
    think, fetch, other."""
    title: str
    """One line for a human: ``Run `pytest -q```, ``Write notes.txt``; control
    characters in it are shown as escapes (``\\x1b``, ``\\r``), never raw. It may be cut:
    ``arguments`` holds the whole call."""
    arguments: Mapping[str, Any] | None
    agent: Agent
    call_id: str


Approver = Callable[[PermissionRequest], Awaitable[PermissionDecision]]


class Permissions(PermissionGate[Agent, PermissionRequest]):
    """The policy and the approvers of one context (``ctx.permissions``; the rules are
    in :mod:`dsh.core._permissions`)."""

    def __init__(self, ctx: Context, config: PermissionsConfig | None = None) -> None:
        super().__init__(ctx, config, PermissionRequest)


class Tracing:
    """The tracing seam (``ctx.tracing``): how core, providers and servers take part in
    distributed tracing without importing a tracing library. This base traces nothing.

    A tracing plugin (``dsh-otel``) subclasses it, sets ``enabled = True`` to have the
    agent loop call :meth:`turn`, :meth:`model_call` and :meth:`tool_call`, and installs
    it with :func:`install_tracing`. The default, :data:`NO_TRACING`, leaves ``enabled``
    False, so an untraced runtime pays one attribute check per turn, per model call and
    per tool call.

    Who calls what: the agent loop, only when ``enabled``, the three hooks (the
    :class:`TracedCall` a hook returns may stay current for the tracing library until
    the loop calls its ``end``, once, in the same task); a provider that starts a child
    process, :meth:`headers` (W3C ``traceparent`` / ``tracestate`` for ACP ``_meta`` or
    the environment); a server that runs a turn for a remote caller (``dsh acp``),
    :meth:`continue_from` with the headers the caller sent, around the turn.
    """

    __slots__ = ()

    enabled: bool = False
    """True if the agent loop should report model and tool calls."""

    def headers(self, run_id: str | None = None) -> dict[str, str]:
        """W3C trace-context headers to hand a child process: ``traceparent`` and,
        where there is one, ``tracestate`` (and ``baggage``). With ``run_id``, those of
        that delegation's span when the tracer has one; else those of the current span.
        Empty when nothing is traced (always, by default). A new dict each call."""
        return {}

    def continue_from(self, headers: Mapping[str, object]) -> AbstractContextManager[None]:
        """A context manager that makes the remote parent in ``headers`` (W3C keys
        ``traceparent``, ``tracestate``, ``baggage``; other keys are ignored) current
        while it is entered, so a turn run inside it continues the caller's trace.
        By default: does nothing."""
        return NO_CONTEXT

    def turn(self, agent: Agent, turn: int) -> TracedCall:
        """``agent`` started turn number ``turn`` (its ``turn/start`` is in the log;
        only when ``enabled``). Ended after the ``turn/end``."""
        return NO_CALL

    def model_call(self, agent: Agent, request: ModelRequest) -> TracedCall:
        """``agent`` is about to call its model with ``request`` (only when ``enabled``)."""
        return NO_CALL

    def tool_call(self, agent: Agent, call: ToolCall) -> TracedCall:
        """``agent`` is about to run the tool ``call`` (only when ``enabled``)."""
        return NO_CALL


NO_TRACING = Tracing()
"""The default ``ctx.tracing``: traces nothing."""


class TracingHost(Protocol):
    """What :func:`install_tracing` needs of a context: its ``tracing`` seam."""

    tracing: Tracing


def install_tracing(ctx: TracingHost, tracing: Tracing) -> Disposer:
    """Make ``tracing`` the context's ``ctx.tracing``; the disposer puts the default
    back. A second tracer while one is installed raises ``ValueError``."""
    if ctx.tracing is not NO_TRACING:
        raise ValueError(
            f"a tracer is already installed in this context ({type(ctx.tracing).__name__})"
        )
    ctx.tracing = tracing

    def remove() -> None:
        if ctx.tracing is tracing:
            ctx.tracing = NO_TRACING

    return remove


class Context(Container):
    """Services shared by everything in one dsh runtime.

    ``events`` (the bus), ``tools``, ``llm``, ``agents``, ``jobs``, ``plugins``,
    ``permissions`` (who may run which tool),
    ``tracing`` (the tracing seam, a no-op by default),
    ``sandbox`` (the root :class:`~dsh.core.permissions.SandboxPolicy` every agent narrows),
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
        super().__init__()
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
        (:func:`~dsh.core.tracing.install_tracing`)."""
        self.tool_tape: ToolTape | None = ToolTape.from_env()
        """Where the agents' tool calls are recorded and replayed: the tape proxy
        ``DSH_TAPE_PROXY`` names (None when it names none)."""
        self._default_model: BoundModel | None = None
        self.tree_budget: object | None = None
        """The budget of the context's whole delegation tree (``Context.open(budget=...)``,
        a :class:`dsh.subagent.Budget`; None: none): the subagent runtime enforces it."""
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
        budget: object | None = None,
        record: str | os.PathLike[str] | None = None,
    ) -> AsyncIterator[Context]:
        """Open a context, load the preset's enabled rows, and tear it all down on exit.

        ``budget`` (a :class:`dsh.subagent.Budget`) caps what all the context's agents
        and everything they delegate spend, together; the subagent runtime
        (``dsh-subagent``, loaded by any subagent provider row) enforces it, and opening
        a context with a budget but without that runtime fails.

        ``record`` (a directory) records the context's model calls and every agent's
        tool calls — and those of the dsh processes it starts — into a tape there, as
        ``dsh run --record`` does (needs dsh-tape; see :data:`dsh.core.tapes.RECORDER_GROUP`).

        The root sandbox policy is the preset's ``[sandbox]`` table (``sandbox``
        replaces it), narrowed by the policy a parent dsh process passed down
        (:data:`~dsh.core.permissions.SANDBOX_ENV`); the preset's own files are protected.

        Agents created without a model use the preset's ``[agent.model]``, else the model
        the environment names, as ``dsh run`` does (:meth:`default_model`).

        The first open in a process also makes the garbage collector's full
        collections rarer (:func:`~dsh.core.lifecycle.tune_gc`; ``DSH_GC_TUNING=off`` keeps
        CPython's schedule)."""
        tune_gc()
        ctx = cls(
            defaults=preset.agent if preset is not None else None,
            cwd=cwd,
            sessions_dir=sessions_dir,
            permissions=preset.permissions if preset is not None else None,
            sandbox=root_sandbox(preset, sandbox),
        )
        ctx.tree_budget = budget
        ctx._own_tasks()
        stop_recording: Callable[[], None] | None = None
        try:
            if preset is not None:  # DSH_OTEL=1 adds dsh-otel (with_tracing_row)
                rows = with_tracing_row(preset.enabled_rows(), len(preset.plugin))
                await ctx.plugins.load_rows(rows)
            if budget is not None and not ctx.has_service("subagents"):
                raise ConfigError(
                    "Context.open(budget=...) needs the subagent runtime to enforce the"
                    " budget: load a subagent provider row (e.g. dsh-subagent-spawn-in-process,"
                    " as the standard preset does), or open the context without a budget"
                )
            if record is not None:
                stop_recording = start_recorder(ctx, record)
            yield ctx
        finally:
            try:
                await ctx._finish()
                if ctx.tool_tape is not None:  # its last results reach the tape
                    await anyio.to_thread.run_sync(ctx.tool_tape.drain)
            finally:
                if stop_recording is not None:
                    stop_recording()

    def _own_tasks(self) -> None:
        self._start_tasks()

    async def _finish(self) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.aclose()
            finally:
                await self._cancel_tasks()

    async def aclose(self) -> None:
        """Run close hooks (newest first), kill jobs, close agents, unload plugins."""
        self.closing = True
        await self._run_closers()
        await self.jobs.aclose()
        await self.agents.aclose_all()
        await self.plugins.unload_all()

    def route_default_model(self, model: BoundModel) -> None:
        """Make ``model`` the model of agents created without one from now on (a tape
        recorder routes the default model through its proxy)."""
        self._default_model = model

    def default_model(self) -> BoundModel:
        """The model of agents created without one: ``[agent.model]``, else the one the
        environment names (:func:`~dsh.core.model_from_env`: ``OPENAI_BASE_URL``,
        ``DEEPSEEK_API_KEY`` or ``OPENAI_API_KEY``, as ``dsh run`` takes it). Raises
        :class:`~dsh.core.models.NoModelError` saying what to set when neither names one, a
        :class:`~dsh.core.models.ModelConfigError` when its adapter is not loaded."""
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
