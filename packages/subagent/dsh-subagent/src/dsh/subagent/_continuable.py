"""The registry of continuable children (``SubagentRuntime.continuable``).

A continuable child answers more than once. The parent starts it with
:meth:`ContinuableChildren.start` (``SubagentRuntime.start_continuable``), which
returns once the child accepted its first message; then messages it with
:meth:`~ContinuableChildren.send_message` (queued while it runs, waking it when
it waits, cold-resuming it from its persisted session when its activation is
gone), stops its turn with :meth:`~ContinuableChildren.interrupt` (queued
messages are kept), and lists its children with :meth:`~ContinuableChildren.list`.
The child delivers along the way with :meth:`~ContinuableChildren.report`.

Each time a child's turn settles its live parent gets exactly one settlement
notice (``Agent.notify``: a ``user/message`` of kind ``notice`` with source type
``subagent/settled``), which is runtime bookkeeping, not the child's words.
Closing the parent (or the context) drains its children: their activations are
closed and nothing is left running; their sessions stay resumable.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import anyio

from dsh.core import AbortSignal, Agent, Content, Tool, ToolError
from dsh.core.lifecycle import Disposer
from dsh.core.models import as_blocks
from dsh.core.sessions import Event, SessionError
from dsh.subagent._activation_lock import ActivationLock
from dsh.subagent._budget import DescendantsBudget
from dsh.subagent._continuable_record import (
    CHILD_EVENT,
    SPEC_EVENT,
    ContinuableChild,
    request_from_spec,
    spec_for,
)
from dsh.subagent._continuable_store import (
    ListScope,
    acquire_lock,
    is_ancestor,
    list_children,
    load_record,
)
from dsh.subagent._continuable_turns import (
    EVENT_CONTINUABLE_START,
    NOTICE_REPORT,
    message_text,
    quoted,
    turn_settled,
    turn_started,
    wait_accepted,
)
from dsh.subagent._errors import (
    ContinuationUnavailable,
    Draining,
    DuplicateChild,
    InvalidRequest,
    NotResumable,
    StartAborted,
    Unauthorized,
)
from dsh.subagent._provider import SubagentProvider, supports_continuable
from dsh.subagent._types import SubagentStartRequest

if TYPE_CHECKING:
    from dsh.core import Context

__all__ = ["ContinuableChildren", "Delivery"]

_log = logging.getLogger("dsh.subagent._continuable")

Delivery = Literal["queued", "woken", "resumed"]
"""How :meth:`ContinuableChildren.send_message` delivered: queued behind a running
turn, woke a waiting child, or cold-resumed one from its persisted session."""


class ContinuableChildren:
    """Starts, messages, interrupts, lists and drains continuable children.

    It knows the runtime only through what it is given: ``check_start`` (the gate
    every start passes), ``get_provider`` (a provider by name), the descendants
    ``budget`` and ``draining`` (the runtime is closing).
    """

    def __init__(
        self,
        ctx: Context,
        *,
        check_start: Callable[[str, SubagentStartRequest], SubagentProvider],
        get_provider: Callable[[str], SubagentProvider | None],
        budget: DescendantsBudget,
        draining: Callable[[], bool],
    ) -> None:
        self._ctx = ctx
        self._check_start = check_start
        self._get_provider = get_provider
        self._budget = budget
        self._runtime_draining = draining
        self._children: dict[str, ContinuableChild] = {}
        self._tools: list[Tool] = []
        self._hooked: dict[str, tuple[Agent, Disposer]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.draining = False
        """True once the context is closing: every operation raises ``DRAINING``."""

    # -- lookup -------------------------------------------------------------------

    def get(self, agent_id: str) -> ContinuableChild | None:
        """The record of ``agent_id`` known to this process (live or drained), or None."""
        return self._children.get(agent_id)

    def live(self) -> builtins.list[ContinuableChild]:
        """Children with a live activation."""
        return [r for r in self._children.values() if r.agent is not None]

    def add_child_tool(self, tool: Tool) -> Disposer:
        """Give every continuable child (live now or activated later) the scoped
        tool ``tool`` (e.g. ``report``); the disposer takes it away again."""
        self._tools.append(tool)
        removers = [self._give(record, tool) for record in self.live()]

        def remove() -> None:
            if tool in self._tools:
                self._tools.remove(tool)
            for remover in removers:
                if remover is not None:
                    remover()

        return remove

    # -- start --------------------------------------------------------------------

    async def start(self, name: str, request: SubagentStartRequest) -> ContinuableChild:
        """Start a continuable child on provider ``name``; returns once the child
        accepted its first message (its first turn started and is on record).

        The request's signal cancels the start; once this returns, the child is
        independent of it. Same gate as a one-shot start, plus:
        ``CONTINUATION_UNAVAILABLE`` for a provider without ``prepare_continuable``,
        ``INVALID_REQUEST`` for an ``output_schema``, ``DRAINING`` when the parent
        or the context is closing.
        """
        provider = self._check_start(name, request)
        if not supports_continuable(provider):
            raise ContinuationUnavailable(
                f'subagent provider "{name}" cannot run continuable children (it has no'
                " prepare_continuable); use it for one-shot runs",
            )
        if request.output_schema is not None:
            raise InvalidRequest(
                "continuable children do not take an output_schema (they answer more than"
                " once); use a one-shot run for structured output",
            )
        parent = request.parent
        self._check_open(parent)
        root = self._budget.take(parent)
        prepare = provider.prepare_continuable  # type: ignore[attr-defined]
        try:
            agent: Agent = await prepare(request)
        except BaseException:
            self._budget.refund(root)
            raise
        record = ContinuableChild(
            agent.id, provider.name, parent.id, request.label, depth=agent.depth
        )
        try:
            if agent.id in self._children:
                raise DuplicateChild(
                    f'a continuable subagent "{agent.id}" is already registered',
                )
            lock = acquire_lock(self._ctx, agent.id)
            record.spec = spec_for(request, provider.name, agent.id)
            agent.record(SPEC_EVENT, record.spec)
            self._attach(record, agent, lock)
            self._hook_parent(parent)
            record.accepted = asyncio.Event()
            agent.followup(request.prompt_blocks)
            if not await wait_accepted(record, request.signal):
                raise StartAborted(f"subagent start aborted: {request.signal.reason}")
            if record.agent is None:
                raise Draining(
                    f'subagent "{agent.id}" was shut down before it accepted its first message',
                )
        except BaseException:
            self._budget.refund(root)
            await self._discard(record, agent)
            raise
        started = {
            "agent_id": agent.id,
            "provider": provider.name,
            "parent_agent": parent.id,
            "label": request.label,
        }
        if not parent.closed:
            parent.record(CHILD_EVENT, started)
        self._ctx.events.emit(EVENT_CONTINUABLE_START, dict(started), scope=parent.id)
        return record

    # -- messages -----------------------------------------------------------------

    async def send_message(
        self,
        caller: Agent,
        agent_id: str,
        message: Content,
        *,
        signal: AbortSignal | None = None,
    ) -> tuple[ContinuableChild, Delivery]:
        """Deliver ``message`` from ``caller`` (the child's parent) to child ``agent_id``.

        Queued while the child runs; wakes it when it waits (also after an
        interrupt: its kept messages run first); cold-resumes it from its
        persisted session when it has no live activation. Raises
        ``UNAUTHORIZED`` (not the parent), ``NOT_RESUMABLE``, ``DRAINING``,
        ``CONTINUATION_UNAVAILABLE`` (its provider is not registered) or
        ``DUPLICATE_CHILD`` (it is live in another process).
        """
        self._check_open(caller)
        if agent_id == caller.id:
            raise Unauthorized(f'agent "{agent_id}" cannot send a message to itself')
        record = self._children.get(agent_id) or load_record(self._ctx, agent_id)[0]
        if record.parent_id != caller.id:
            raise Unauthorized(
                f'agent "{caller.id}" may not message subagent "{agent_id}": only its parent'
                f' "{record.parent_id}" may',
            )
        self._check_not_draining(record)
        signal = signal or AbortSignal()
        blocks = as_blocks(message)
        async with self._locks.setdefault(agent_id, asyncio.Lock()):
            record = self._children.get(agent_id) or record
            self._check_not_draining(record)
            agent = record.agent
            if agent is not None and agent.closed and record.released is not None:
                with anyio.CancelScope(shield=True):  # someone is closing it: let them finish
                    await record.released.wait()
                agent = record.agent
            how: Delivery = "woken"
            if agent is None or agent.closed:
                agent = await self._activate(caller, record, signal, blocks)
                how = "resumed"
            waiting = not agent.running
            if not waiting:
                how = "queued"
            if waiting:
                record.accepted = asyncio.Event()
            agent.followup(blocks)
        if waiting:
            await wait_accepted(record, signal)
        return record, how

    async def interrupt(
        self, caller: Agent, agent_id: str, *, signal: AbortSignal | None = None
    ) -> tuple[ContinuableChild, bool]:
        """Stop the running turn of child ``agent_id`` (its queued messages are kept)
        and wait until it has stopped. ``caller`` must be a live ancestor, never the
        child itself (``UNAUTHORIZED``). Returns the record and whether a turn was
        running."""
        self._check_open(caller)
        if agent_id == caller.id:
            raise Unauthorized(f'agent "{agent_id}" cannot interrupt itself')
        record = self._children.get(agent_id) or load_record(self._ctx, agent_id)[0]
        if not is_ancestor(self._ctx, self._children, caller.id, record):
            raise Unauthorized(
                f'agent "{caller.id}" may not interrupt subagent "{agent_id}": only its parent'
                f' "{record.parent_id}" or another live ancestor may',
            )
        self._check_not_draining(record)
        agent = record.agent
        if agent is None or not agent.running:
            return record, False
        agent.cancel(f"interrupted by agent {caller.id}")
        with anyio.CancelScope() as scope:
            unlink = signal.on_abort(lambda _reason: scope.cancel()) if signal else None
            try:
                await agent.when_idle()
            finally:
                if unlink is not None:
                    unlink()
        return record, True

    def report(self, child: Agent, message: Content) -> Agent:
        """Deliver ``message`` from continuable child ``child`` to its live direct
        parent, as a notice (source type ``subagent/report``). Returns the parent."""
        record = self._children.get(child.id)
        if record is None or record.agent is not child:
            raise Unauthorized(
                f'agent "{child.id}" is not a continuable subagent: only continuable'
                " subagents can report to a parent",
            )
        self._check_not_draining(record)
        if self.draining or self._ctx.closing:
            raise Draining("the subagent runtime is shutting down")
        parent = self._ctx.agents.get(record.parent_id)
        if parent is None or parent.closed:
            raise ContinuationUnavailable(
                f'the parent agent "{record.parent_id}" of subagent "{child.id}" is not live,'
                " so the report cannot be delivered now; put it in your final answer instead",
            )
        text = "\n".join(
            (f"[report from subagent {child.id}{quoted(record.label)}]", message_text(message))
        )
        parent.notify(text, source={"type": NOTICE_REPORT, "agent_id": child.id})
        return parent

    # -- listing ------------------------------------------------------------------

    def list(self, caller: Agent, scope: ListScope = "children") -> builtins.list[ContinuableChild]:
        """The continuable children (or all descendants) of ``caller``, oldest first.

        Live children report their live state; others are read from their
        persisted sessions. A session that cannot be read is listed with status
        ``failed``, ``readable = False`` and a diagnostic instead of failing the list.
        """
        return list_children(self._ctx, self._children, caller, scope)

    # -- draining -----------------------------------------------------------------

    async def drain_children_of(self, parent_id: str, cause: str = "parent agent closed") -> None:
        """Close the live activations of ``parent_id``'s children and wait until they
        are quiescent (their sessions stay resumable)."""
        self._hooked.pop(parent_id, None)
        await self._drain([r for r in self.live() if r.parent_id == parent_id], cause)

    async def aclose(self) -> None:
        """Refuse new work and drain every live child (the context is closing)."""
        self.draining = True
        await self._drain(self.live(), "context closed")

    async def _drain(self, records: builtins.list[ContinuableChild], cause: str) -> None:
        if not records:
            return
        for record in records:
            record.draining = True
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for record in records:
                    tg.start_soon(self._close_activation, record, cause)

    async def _close_activation(self, record: ContinuableChild, cause: str) -> None:
        agent, released = record.agent, record.released
        try:
            if agent is not None:
                await agent.aclose(cause)
            if released is not None:
                await released.wait()  # another closer may be finishing it
        except Exception:
            _log.exception("closing continuable subagent %s failed", record.id)
        finally:
            record.draining = False

    # -- internals ----------------------------------------------------------------

    def _check_open(self, agent: Agent) -> None:
        if self.draining or self._runtime_draining() or self._ctx.closing:
            raise Draining("the subagent runtime is shutting down")
        if agent.closed:
            raise Draining(f'agent "{agent.id}" is closed')

    def _check_not_draining(self, record: ContinuableChild) -> None:
        if record.draining:
            raise Draining(
                f'subagent "{record.id}" is being shut down (its parent or the context is'
                " closing); message it again once it is resumable",
            )

    async def _activate(
        self,
        caller: Agent,
        record: ContinuableChild,
        signal: AbortSignal,
        blocks: builtins.list[dict[str, Any]],
    ) -> Agent:
        """Cold-resume ``record`` from its persisted session (caller: its parent)."""
        agent_id = record.id
        if self._ctx.sessions is None:
            raise NotResumable(
                f'subagent "{agent_id}" has no live activation and this context keeps no'
                " sessions on disk to resume it from",
            )
        if self._ctx.agents.get(agent_id) is not None:
            raise DuplicateChild(
                f'subagent "{agent_id}" is live in this process outside the continuable'
                " registry; close that agent before messaging it here",
            )
        provider = self._get_provider(record.provider)
        if provider is None or not supports_continuable(provider):
            raise ContinuationUnavailable(
                f'subagent "{agent_id}" was started by provider "{record.provider}", which is'
                " not registered here (or cannot continue children); load its plugin to"
                " resume it",
            )
        lock = acquire_lock(self._ctx, agent_id)
        try:
            request = request_from_spec(record.spec, caller, signal, blocks)
            prepare = provider.prepare_continuable  # type: ignore[attr-defined]
            agent: Agent = await prepare(request, resume=agent_id)
        except SessionError as exc:
            if lock is not None:
                lock.release()
            raise NotResumable(f'subagent "{agent_id}" cannot be resumed: {exc}') from None
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        seed_length = int(agent.session.header.meta.get("seed_length", 0))
        record.refresh_from(agent.session.events, seed_length)
        self._attach(record, agent, lock)
        self._hook_parent(caller)
        return agent

    def _attach(self, record: ContinuableChild, agent: Agent, lock: ActivationLock | None) -> None:
        record.agent = agent
        record.lock = lock
        record.released = asyncio.Event()
        record.detach = [agent.observe(partial(self._on_event, record, agent), deltas=False)]
        for tool in self._tools:
            remover = self._give(record, tool)
            if remover is not None:
                record.detach.append(remover)
        agent.on_close(partial(self._on_closed, record, agent))
        self._children[record.id] = record

    def _give(self, record: ContinuableChild, tool: Tool) -> Disposer | None:
        agent = record.agent
        if agent is None:
            return None
        try:
            return agent.tools.add(tool)
        except ToolError:
            _log.warning("subagent %s: tool %r clashes, not added", record.id, tool.name)
            return None

    def _hook_parent(self, parent: Agent) -> None:
        entry = self._hooked.get(parent.id)
        if entry is not None and entry[0] is parent:
            return
        remove = parent.on_close(partial(self.drain_children_of, parent.id))
        self._hooked[parent.id] = (parent, remove)

    async def _on_closed(self, record: ContinuableChild, agent: Agent) -> None:
        detach, record.detach = record.detach, []
        for remover in detach:
            remover()
        if record.agent is agent:
            record.agent = None
        lock, record.lock = record.lock, None
        if lock is not None:
            lock.release()
        for event in (record.released, record.accepted):
            if event is not None:
                event.set()

    async def _discard(self, record: ContinuableChild, agent: Agent) -> None:
        record.draining = True
        try:
            await agent.aclose("continuable start failed")
        finally:
            if record.lock is not None:
                record.lock.release()
                record.lock = None
            if self._children.get(record.id) is record:
                del self._children[record.id]

    def _on_event(self, record: ContinuableChild, agent: Agent, event: Event) -> None:
        kind = event.type
        if kind == "turn/start":
            turn_started(self._ctx, record, agent, event)
        elif kind == "turn/end" and record.agent is agent:
            turn_settled(self._ctx, record, agent, event, quiet=self.draining)
