"""The agent registry's logic (``ctx.agents``): create, look up, resume and close agents.

:class:`LiveAgents` is generic in the agent class it builds: the public
:class:`~dsh.core.agents.AgentRegistry` (in :mod:`dsh.core._context`) binds it to
:class:`~dsh.core.Agent` and builds each one with its context (:meth:`LiveAgents._new_agent`).
What the registry needs of the context is :class:`RegistryHost`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from dsh.core._agent import AgentCore
from dsh.core._cut_off import CutOffTurn, close_cut_off_turn, unended_turn
from dsh.core._errors import ConfigError
from dsh.core._llm import BoundModel, LLMRuntime, ModelConfig
from dsh.core._presets import AgentDefaults
from dsh.core._prompt import PromptSections
from dsh.core._sandbox import SandboxConfig, SandboxPolicy
from dsh.core._session import (
    Event,
    Session,
    SessionError,
    SessionHeader,
    SessionStore,
    new_session_id,
)
from dsh.core._tools import AgentTools, ToolRegistry, ToolView

__all__ = ["ConfigError", "LiveAgents", "RegistryHost"]

A = TypeVar("A", bound=AgentCore)


class RegistryHost(Protocol):
    """What the registry needs of its context (a :class:`~dsh.core.Context`): where new
    agents' defaults come from."""

    @property
    def sandbox(self) -> SandboxPolicy:
        """The root sandbox policy a root agent narrows."""

    @property
    def cwd(self) -> str:
        """A root agent's working directory."""

    @property
    def sessions(self) -> SessionStore | None:
        """Where persisted sessions live (None: in memory only)."""

    @property
    def prompt(self) -> PromptSections:
        """The deployment's system-prompt sections (copied into each agent)."""

    @property
    def tools(self) -> ToolRegistry:
        """The registered tools (an agent's default view)."""

    @property
    def defaults(self) -> AgentDefaults:
        """The preset's agent defaults (``max_steps``)."""

    @property
    def llm(self) -> LLMRuntime:
        """Binds a :class:`~dsh.core.models.ModelConfig` to its adapter."""

    def default_model(self) -> BoundModel:
        """The model of a root agent created without one."""


class LiveAgents(Generic[A]):
    """Creates agents and tracks the live ones (the logic of
    :class:`~dsh.core.agents.AgentRegistry`, which builds the agents: :meth:`_new_agent`)."""

    def __init__(self, ctx: RegistryHost) -> None:
        self._ctx = ctx
        self._live: dict[str, A] = {}
        self._on_create: tuple[Callable[[A], None], ...] = ()

    def on_create(self, callback: Callable[[A], None]) -> Callable[[], None]:
        """Call ``callback(agent)`` for every agent created or resumed from now on
        (before it runs anything); returns its remover."""
        self._on_create = (*self._on_create, callback)

        def remove() -> None:
            self._on_create = tuple(c for c in self._on_create if c is not callback)

        return remove

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
    ) -> A:
        """A new live agent on ``session`` (its ``forget`` is :meth:`_forget`); ``cut_off``:
        the log ends inside a turn, to be taken up again first."""
        raise NotImplementedError

    def create(
        self,
        *,
        parent: A | None = None,
        model: ModelConfig | BoundModel | None = None,
        persona: str | None = None,
        tools: ToolView | None = None,
        seed: Sequence[Event] = (),
        seed_from: str | None = None,
        meta: Mapping[str, Any] | None = None,
        label: str | None = None,
        max_steps: int | None = None,
        persist: bool | None = None,
        session_id: str | None = None,
        prompt: PromptSections | None = None,
        sandbox: SandboxConfig | SandboxPolicy | None = None,
    ) -> A:
        """Create an agent with a new session.

        ``parent`` sets lineage (``parent_session``), depth (parent's + 1), cwd and
        model defaults. ``seed`` (with ``seed_from``, the session it was taken from)
        starts the log with existing events, shared by reference. ``persist``
        defaults to whether the context has a session store. ``prompt`` is the base
        of the system prompt (default: the deployment's sections); ``persona``
        replaces its persona section. ``sandbox`` narrows the parent's sandbox policy
        (or the context's, for a root agent); asking for more raises
        :class:`~dsh.core.permissions.SandboxError`.
        """
        ctx = self._ctx
        ceiling = parent.sandbox if parent is not None else ctx.sandbox
        policy = ceiling.narrowed(sandbox, what="the agent's sandbox")
        bound = self._resolve_model(model, parent)
        header_meta: dict[str, Any] = {
            "cwd": parent.cwd if parent is not None else ctx.cwd,
            "origin": "delegation" if parent is not None else "user",
            "delegation_depth": parent.depth + 1 if parent is not None else 0,
        }
        if seed:
            header_meta["seed_length"] = len(seed)
        if policy is not ctx.sandbox:
            header_meta["sandbox"] = policy.to_json()
        if meta:
            header_meta.update(meta)
        header = SessionHeader(  # (positional: no keyword dict per agent)
            session_id or new_session_id(),
            parent.id if parent is not None else None,
            time.time(),  # created_at
            header_meta,
            seed_from if seed else None,
        )
        store = ctx.sessions
        if persist is None:
            persist = store is not None
        if persist:
            if store is None:
                raise ConfigError("persist=True needs a session store (set sessions_dir)")
            session = store.create(header, seed)
        else:
            session = Session(header, seed)
        prompt = prompt.copy() if prompt is not None else ctx.prompt.copy()
        if persona is not None:
            prompt.set("persona", persona)
        agent = self._new_agent(
            session,
            bound,
            prompt,
            AgentTools(tools if tools is not None else ctx.tools.view()),
            parent_id=parent.id if parent is not None else None,
            label=label,
            max_steps=max_steps or ctx.defaults.max_steps,
            sandbox=policy,
        )
        if parent is not None:
            agent.tool_tape = parent.tool_tape
        self._live[agent.id] = agent
        for callback in self._on_create:
            callback(agent)
        return agent

    def resume(
        self,
        session_id: str,
        *,
        model: ModelConfig | BoundModel | None = None,
        tools: ToolView | None = None,
        label: str | None = None,
        prompt: PromptSections | None = None,
        max_steps: int | None = None,
        cut_off_turn: CutOffTurn = "abort",
    ) -> A:
        """Re-open a persisted session as a live agent (a torn tail is cut off).

        A turn the log shows started but never ended (the process stopped during
        it) is, with ``cut_off_turn="abort"``, closed first with stop reason
        ``aborted``; with ``"continue"`` it is taken up again as the agent's next
        turn, ahead of any message (its tool calls without a result run again, then
        the model is asked for the next step; it runs once a message is queued or
        :meth:`~dsh.core.Agent.resume` is called). ``prompt`` is the system prompt
        (default: the deployment's sections).
        """
        if session_id in self._live:
            raise SessionError(f"session {session_id!r} is already live")
        store = self._ctx.sessions
        if store is None:
            raise ConfigError("resuming a session needs a session store (set sessions_dir)")
        session, _torn = store.resume(session_id)
        resumes = cut_off_turn == "continue" and unended_turn(session.events) is not None
        if not resumes:
            try:
                close_cut_off_turn(session)
            except SessionError:
                session.close()
                raise
        parent = self._live.get(session.header.parent_session or "")
        agent = self._new_agent(
            session,
            self._resolve_model(model, parent),
            (prompt if prompt is not None else self._ctx.prompt).copy(),
            AgentTools(tools if tools is not None else self._ctx.tools.view()),
            parent_id=session.header.parent_session,
            label=label,
            max_steps=max_steps or self._ctx.defaults.max_steps,
            sandbox=_resumed_sandbox(self._ctx.sandbox, parent, session),
            cut_off=resumes,
        )
        if parent is not None:
            agent.tool_tape = parent.tool_tape
        self._live[agent.id] = agent
        for callback in self._on_create:
            callback(agent)
        return agent

    def get(self, agent_id: str) -> A | None:
        """The live agent with ``agent_id``, or None."""
        return self._live.get(agent_id)

    def list(self) -> list[A]:
        """Live agents in creation order."""
        return list(self._live.values())

    def __len__(self) -> int:
        return len(self._live)

    async def aclose_all(self) -> None:
        """Close every live agent, children before parents."""
        for agent in sorted(self._live.values(), key=lambda a: -a.depth):
            await agent.aclose("context closed")

    def _forget(self, agent: AgentCore) -> None:
        if self._live.get(agent.id) is agent:
            del self._live[agent.id]

    def _resolve_model(
        self, model: ModelConfig | BoundModel | None, parent: AgentCore | None
    ) -> BoundModel:
        if isinstance(model, BoundModel):
            return model
        if isinstance(model, ModelConfig):
            return self._ctx.llm.bind(model)
        if parent is not None:
            return parent.model
        return self._ctx.default_model()


def _resumed_sandbox(
    root: SandboxPolicy, parent: AgentCore | None, session: Session
) -> SandboxPolicy:
    """A resumed agent's policy: its parent's (or the context's), narrowed by the one
    its session recorded, so a cold resume is never wider than the first activation."""
    ceiling = parent.sandbox if parent is not None else root
    recorded = session.header.meta.get("sandbox")
    if isinstance(recorded, str):
        return ceiling.narrowed(SandboxPolicy.from_json(recorded), strict=False)
    return ceiling


def default_cwd() -> str:
    """The process working directory."""
    return os.getcwd()
