"""Tool permissions (``ctx.permissions``): allow, ask or deny, per tool, per preset.

A tool that acts on the world (writes a file, runs a command) declares a default
policy (``Tool(permission="ask")``); a tool without one is not governed. Before
such a tool runs, :meth:`~dsh.core.Permissions.check` decides:

* ``allow`` — it runs; ``deny`` — it is not offered to the model at all
  (:meth:`~dsh.core.Permissions.offered`), and a call by name anyway is refused, the model told why;
* ``ask`` — an *approver* answers: the ACP client when the agent is served over
  ACP (``session/request_permission``), the terminal when ``dsh run`` has one.
  Approvers are registered per agent and found through the agent's ancestors, so a
  child asks whoever its parent asks. When nobody can answer (an unattended run),
  the call is refused with a reason that says how to allow it — never a hang.

The preset's ``[permissions]`` table overrides the tools' defaults::

    [permissions]
    default = "ask"            # tools not listed below (unset: each tool's own default)
    [permissions.tools]
    read_file = "allow"
    shell = "ask"

``dsh run --yes`` (``allow_all``) allows every tool without asking.

The rules are :class:`PermissionGate`, generic in the agent and in the request an
approver is asked; :class:`~dsh.core.Permissions` (beside the context, which names
both) binds it to :class:`~dsh.core.Agent` and :class:`~dsh.core.PermissionRequest`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from dsh.core._effects import Disposer
from dsh.core._events import EventBus
from dsh.core._permission_config import (
    PermissionDecision,
    PermissionPolicy,
    PermissionsConfig,
)

if TYPE_CHECKING:
    from dsh.core._llm import ToolSpec
    from dsh.core._tools import AgentTools, Tool

__all__ = [
    "PERMISSION_REFUSED",
    "PermissionGate",
    "PermissionSubject",
    "PermissionsHost",
]

PERMISSION_REFUSED = "permission/refused"
"""Bus event of a refused tool call (policy ``deny``, nobody to ask, or a no)."""


class PermissionSubject(Protocol):
    """What the policy needs of an agent (an :class:`~dsh.core.Agent`): its id, and its
    parent's, to find an approver up its ancestors."""

    @property
    def id(self) -> str:
        """The agent id."""

    @property
    def parent_id(self) -> str | None:
        """The parent agent's id (None for a root agent)."""


S = TypeVar("S", bound=PermissionSubject)
R = TypeVar("R")


class _Agents(Protocol):
    def get(self, agent_id: str) -> PermissionSubject | None: ...


class PermissionsHost(Protocol):
    """What :class:`PermissionGate` needs of its context (a :class:`~dsh.core.Context`):
    the live agents, to find an approver up a child's ancestors, and the bus."""

    @property
    def agents(self) -> _Agents:
        """The live agents by id."""

    @property
    def events(self) -> EventBus:
        """Where a refusal is emitted (:data:`PERMISSION_REFUSED`)."""


class PermissionGate(Generic[S, R]):
    """The policy and the approvers of one context: the logic of
    :class:`~dsh.core.Permissions`, generic in the agent (``S``) and in the request an
    approver answers (``R``, built by the ``request`` it is given)."""

    def __init__(
        self,
        ctx: PermissionsHost,
        config: PermissionsConfig | None,
        request: Callable[[str, str, str, Mapping[str, Any] | None, S, str], R],
    ) -> None:
        self._ctx = ctx
        self.config = config or PermissionsConfig()
        self.allow_all = False
        """Allow every tool without asking (``dsh run --yes``)."""
        self._request = request
        """Builds what an approver is asked: (tool, kind, title, arguments, agent, call id)."""
        self._approvers: dict[str | None, Callable[[R], Awaitable[PermissionDecision]]] = {}
        self._always: set[tuple[str | None, str]] = set()

    def offered(self, tools: AgentTools) -> tuple[ToolSpec, ...]:
        """The specs of ``tools`` the model is shown: all but the tools whose policy is
        ``deny`` (a denied tool is not offered; a call to it anyway is refused)."""
        specs = tuple(tools.specs())
        if self.allow_all:
            return specs
        governed = tools.governed()  # only a governed tool can be denied
        if not governed:
            return specs
        denied = {tool.name for tool in governed if self.policy_for(tool) == "deny"}
        return tuple(s for s in specs if s.name not in denied) if denied else specs

    def policy_for(self, tool: Tool) -> PermissionPolicy:
        """The policy that applies to ``tool`` (``allow`` for ungoverned tools)."""
        if tool.permission is None or self.allow_all:
            return "allow"
        explicit = self.config.tools.get(tool.name)
        if explicit is not None:
            return explicit
        return self.config.default or tool.permission

    def set_approver(
        self,
        approver: Callable[[R], Awaitable[PermissionDecision]],
        *,
        agent: PermissionSubject | None = None,
    ) -> Disposer:
        """Who answers ``ask`` for ``agent`` and its descendants (``None``: for every
        agent with no closer approver). The disposer removes it."""
        key = agent.id if agent is not None else None
        self._approvers[key] = approver

        def remove() -> None:
            if self._approvers.get(key) is approver:
                del self._approvers[key]
            self._always.difference_update({a for a in self._always if a[0] == key})

        return remove

    def _approver_for(
        self, agent: PermissionSubject
    ) -> tuple[str | None, Callable[[R], Awaitable[PermissionDecision]]] | None:
        seen = 0
        current: PermissionSubject | None = agent
        while current is not None and seen < 256:
            found = self._approvers.get(current.id)
            if found is not None:
                return current.id, found
            parent_id = current.parent_id
            current = self._ctx.agents.get(parent_id) if parent_id is not None else None
            seen += 1
        fallback = self._approvers.get(None)
        return (None, fallback) if fallback is not None else None

    async def check(self, tool: Tool, arguments: Any, agent: S, call_id: str) -> PermissionDecision:
        """Decide whether ``tool`` may run with ``arguments`` for ``agent``. A refusal is
        also emitted on the context's bus as :data:`PERMISSION_REFUSED` (scoped to the agent):
        ``agent``, ``tool``, ``call_id``, ``title``, ``reason``."""
        decision = await self._decide(tool, arguments, agent, call_id)
        if not decision.allowed:
            self._ctx.events.emit(
                PERMISSION_REFUSED,
                {
                    "agent": agent.id,
                    "tool": tool.name,
                    "call_id": call_id,
                    "title": tool.title_for(arguments),
                    "reason": decision.reason,
                },
                scope=agent.id,
            )
        return decision

    async def _decide(
        self, tool: Tool, arguments: Any, agent: S, call_id: str
    ) -> PermissionDecision:
        policy = self.policy_for(tool)
        if policy == "allow":
            return PermissionDecision(True)
        title = tool.title_for(arguments)
        if policy == "deny":
            return PermissionDecision(
                False,
                f'tool "{tool.name}" is denied by the permission policy ({title}); to allow it,'
                f' set [permissions.tools] {tool.name} = "allow" (or "ask") in the preset',
            )
        found = self._approver_for(agent)
        if found is None:
            return PermissionDecision(
                False,
                f'tool "{tool.name}" needs approval ({title}) and nobody can answer: this agent'
                f" runs unattended. Allow it in the preset ([permissions.tools] {tool.name} ="
                ' "allow") or run dsh with --yes.',
            )
        owner, approver = found
        if (owner, tool.name) in self._always:
            return PermissionDecision(True)
        raw = arguments.model_dump() if isinstance(arguments, BaseModel) else arguments
        request = self._request(
            tool.name,
            tool.kind,
            title,
            raw if isinstance(raw, Mapping) else None,
            agent,
            call_id,
        )
        decision = await approver(request)
        if decision.allowed and decision.always:
            self._always.add((owner, tool.name))
        if not decision.allowed and not decision.reason:
            return PermissionDecision(False, f'tool "{tool.name}" was not approved ({title})')
        return decision
