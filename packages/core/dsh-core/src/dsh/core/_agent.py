"""Agents: a session, a model, a system prompt, tools, and the turns they run.

Messages reach an agent four ways:

* :meth:`Agent.followup` queues a message that starts a new turn (now if idle);
* :meth:`Agent.steer` delivers a message into the running turn at its next step
  (starts a turn if idle);
* :meth:`Agent.inject` adds context without starting a turn;
* :meth:`Agent.cancel` aborts the running turn (queued messages are kept; the
  agent stays paused until the next :meth:`followup` or :meth:`resume`).

A steered message or notice that arrives during the last step of a turn (when
there is no next step to deliver it to) starts the next turn instead of waiting
for one; an inject that arrives then is added to the log without a turn.

A turn runs in the caller's task when the caller waits for it (:meth:`Agent.drive`,
:meth:`Agent.run`), else as a task owned by the context, so no agent task
outlives the context; :meth:`Agent.aclose` cancels and waits until the agent is
quiescent. The turn itself is in :mod:`dsh.core._turn` (:class:`~dsh.core._turn.TurnLoop`,
this class's base).

:class:`AgentCore` knows its context only through :class:`AgentHost` (what it asks of a
:class:`~dsh.core.Context`); the public :class:`~dsh.core.Agent` (in :mod:`dsh.core._context`,
beside the context it names) adds the hooks that need the context's own types: tool
contexts and tracing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol

import anyio

from dsh.core._content import Content, as_blocks
from dsh.core._cut_off import CONTINUE
from dsh.core._effects import Disposer
from dsh.core._jobs import JobRegistry
from dsh.core._llm import BoundModel
from dsh.core._prompt import PromptSections
from dsh.core._sandbox import SandboxPolicy
from dsh.core._session import Event, Session, SessionError
from dsh.core._signals import AbortSignal
from dsh.core._tool_tape import ToolTape
from dsh.core._tools import AgentTools
from dsh.core._turn import (
    AgentObserver,
    StopReason,
    TurnHost,
    TurnLoop,
    TurnOutcome,
    last_output,
    turns_so_far,
)

__all__ = [
    "AgentCore",
    "AgentHost",
    "AgentObserver",
    "StopReason",
    "TurnOutcome",
    "last_output",
]

_log = logging.getLogger("dsh.core._agent")


class AgentHost(TurnHost, Protocol):
    """What an agent needs of its context (a :class:`~dsh.core.Context`): the root
    sandbox, the jobs it may own, and the loop its turns run on."""

    @property
    def sandbox(self) -> SandboxPolicy:
        """The root sandbox policy (an agent created without one runs under it)."""

    @property
    def tool_tape(self) -> ToolTape | None:
        """Where a root agent's tool calls are recorded and replayed (None: nowhere)."""

    @property
    def jobs(self) -> JobRegistry:
        """The context's jobs: an agent closes only once its own have stopped."""

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> asyncio.Task[Any]:
        """Run ``fn(*args)`` as a task the context owns (a turn's driver)."""

    def start_eager(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``fn(*args)`` in a task of its own, its first step now (a child's driver)."""

    def defer(self, key: object, callback: Callable[[], object]) -> None:
        """Call ``callback()`` at the loop's next iteration unless ``undefer(key)`` first."""

    def undefer(self, key: object) -> None:
        """Forget what ``defer`` keeps under ``key``."""

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback()`` at the loop's next iteration (a followup's driver)."""


class AgentCore(TurnLoop):
    """One agent's lifecycle: its messages, its turns and its closing (the base of
    :class:`~dsh.core.Agent`, which adds the hooks that name the context's types)."""

    __slots__ = (
        "__weakref__",
        "_closed",
        "_closers",
        "_closing",
        "_driver_pending",
        "_forget",
        "_idle",
        "_paused",
        "_queue",
        "_running",
        "ctx",
        "label",
        "parent_id",
        "sandbox",
    )

    def __init__(
        self,
        ctx: AgentHost,
        session: Session,
        model: BoundModel,
        prompt: PromptSections,
        tools: AgentTools,
        parent_id: str | None = None,
        label: str | None = None,
        max_steps: int = 50,
        sandbox: SandboxPolicy | None = None,
        forget: Callable[[AgentCore], None] | None = None,
        cut_off: bool = False,
    ) -> None:
        self.ctx = ctx
        self._host = ctx
        self.sandbox = sandbox if sandbox is not None else ctx.sandbox
        """How far this agent's tool processes reach: its parent's policy, narrowed."""
        self.session = session
        self.id = session.header.id  # (the session never changes, nor its id)
        self.model = model
        self.prompt = prompt
        self.tools = tools
        self.tool_tape = ctx.tool_tape
        self._tool_keys = None
        self.parent_id = parent_id
        self.label = label
        self.max_steps = max_steps
        events = session.events
        self.turns = turns_so_far(events) if events else 0
        self._queue: deque[tuple[list[dict[str, Any]], dict[str, Any] | None]] | None = None
        if cut_off:  # the log ends inside a turn: it is taken up again first (_cut_off)
            self._queue = deque((([], CONTINUE),))
        self._steer: list[tuple[list[dict[str, Any]], dict[str, Any]]] | None = None
        self._observers: tuple[AgentObserver, ...] = ()
        self._delta_observers: tuple[AgentObserver, ...] = ()
        self._running = False
        self._driver_pending = False
        self._paused = False
        self._closed = False
        self._idle: asyncio.Event | None = None
        self._scope: anyio.CancelScope | None = None
        self._turn_signal: AbortSignal | None = None
        self._cancel_cause: str | None = None
        self._blocked: str | None = None
        self._closers: list[Callable[[], Awaitable[None]]] | None = None
        self._closing: asyncio.Event | None = None
        self._forget = forget
        """Called once the agent has closed: drops it from the registry's live agents."""

    # -- identity -----------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Delegation depth: 0 for a root agent, parent's + 1 for a child."""
        return int(self.session.header.meta.get("delegation_depth", 0))

    @property
    def cwd(self) -> str | None:
        """The working directory recorded in the session header."""
        cwd = self.session.header.meta.get("cwd")
        return str(cwd) if cwd is not None else None

    @property
    def running(self) -> bool:
        """True while a turn runs or is about to."""
        return self._running

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` has started."""
        return self._closed

    @property
    def paused(self) -> bool:
        """True after :meth:`cancel` until the next :meth:`followup` or :meth:`resume`."""
        return self._paused

    def __repr__(self) -> str:
        return f"<Agent {self.label or self.id} depth={self.depth} turns={self.turns}>"

    # -- observation --------------------------------------------------------------

    def observe(self, observer: AgentObserver, *, deltas: bool = True) -> Disposer:
        """Call ``observer`` for every appended event, and (``deltas=True``) for
        every streamed text delta as a transient ``assistant/delta`` event."""
        self._observers = (*self._observers, observer)
        if deltas:
            self._delta_observers = (*self._delta_observers, observer)
        return _Unobserve(self, observer)

    def unobserve(self, observer: AgentObserver) -> None:
        """Stop calling ``observer`` (what the disposer :meth:`observe` returns does)."""
        if observer in self._observers:
            self._observers = tuple(o for o in self._observers if o is not observer)
        if observer in self._delta_observers:
            self._delta_observers = tuple(o for o in self._delta_observers if o is not observer)

    _MESSAGE_TYPES = frozenset(
        ("user/message", "assistant/message", "tool/call", "tool/result", "turn/start", "turn/end")
    )

    def record(self, type: str, data: Mapping[str, Any]) -> Event:
        """Append a bookkeeping event (not a message: adapters do not show it to the model).

        Observers see it like any other event. Message and turn types are refused:
        those belong to the loop.
        """
        if type in self._MESSAGE_TYPES:
            raise ValueError(f"{type!r} events are written by the agent loop, not recorded")
        return self._append(type, data)

    # -- input --------------------------------------------------------------------

    def followup(self, content: Content) -> None:
        """Queue ``content`` as the user message of a new turn; start it if idle."""
        self._check_open()
        self._enqueue(as_blocks(content), None)

    def start(self, content: Content, *, soon: bool = False) -> None:
        """Queue ``content`` as a new turn and, if idle, start its driver task now (for a
        caller that will not :meth:`drive` it: an in-process child, whose waiters must not
        carry its turn). ``soon``: at the loop's next iteration instead, or at
        :meth:`start_driver` if that comes first (the child's caller gets its run first)."""
        self._check_open()
        if self._queue is None:
            self._queue = deque()
        self._queue.append((as_blocks(content), None))
        self._paused = False
        if not self._running:
            self._running = True
            self._driver_pending = True
            if soon:
                self.ctx.defer(self, self.start_driver)
            else:
                self._spawn_driver(eager=True)

    def notify(self, content: Content, *, source: Mapping[str, Any] | None = None) -> None:
        """Deliver a runtime notice (job or child settlement): into the running turn,
        or as a new turn when idle. It is marked ``kind = "notice"``, not a user's words.
        A paused agent (after :meth:`cancel`) keeps it queued until it is resumed."""
        self._check_open()
        extra = {"kind": "notice", "source": dict(source or {})}
        if self._running:
            self._pending_steer().append((as_blocks(content), extra))
            return
        if self._paused:
            if self._queue is None:
                self._queue = deque()
            self._queue.append((as_blocks(content), extra))
            return
        self._enqueue(as_blocks(content), extra)

    def _enqueue(self, blocks: list[dict[str, Any]], extra: dict[str, Any] | None) -> None:
        if self._queue is None:
            self._queue = deque()
        self._queue.append((blocks, extra))
        self._paused = False
        self._kick()

    def steer(self, content: Content) -> None:
        """Deliver ``content`` into the running turn at its next step (or start a turn)."""
        self._check_open()
        if not self._running:
            self.followup(content)
            return
        self._pending_steer().append((as_blocks(content), {"kind": "steer"}))

    def inject(self, content: Content) -> None:
        """Add ``content`` to the context without starting a turn."""
        self._check_open()
        blocks = as_blocks(content)
        if self._running:
            self._pending_steer().append((blocks, {"kind": "inject"}))
        else:
            self._append("user/message", {"content": blocks, "kind": "inject"})

    def resume(self) -> None:
        """Continue with queued messages after a :meth:`cancel`."""
        self._check_open()
        self._paused = False
        self._kick()

    @property
    def queued(self) -> int:
        """Messages waiting for a turn."""
        return len(self._queue) if self._queue else 0

    def cancel(self, cause: str = "cancelled") -> None:
        """Abort the running turn with ``cause``; queued messages are kept."""
        if not self._running:
            return
        self._paused = True
        if self._cancel_cause is None:
            self._cancel_cause = cause
        if self._turn_signal is not None:
            self._turn_signal.abort(cause)
        if self._scope is not None:
            self._scope.cancel()

    async def when_idle(self) -> None:
        """Wait until no turn is running or queued to run."""
        if not self._running:
            return
        if self._idle is None:
            self._idle = asyncio.Event()  # asyncio-only, and ~10x cheaper than anyio.Event
        await self._idle.wait()

    async def drive(self) -> None:
        """Run the pending turn(s) in the calling task if no driver task has taken
        them yet; otherwise wait until idle.

        A followup schedules its driver for the next loop iteration. A caller that
        is going to wait for the turn anyway can run it here instead, which spares
        a task (the common case of a foreground delegation).
        """
        if self._driver_pending:
            self._driver_pending = False
            await self._drive()
        else:
            await self.when_idle()

    def start_driver(self) -> None:
        """Start the pending turn(s) in a task of their own now, not at the loop's next
        iteration (its first step at once, ``Context.start_eager``: a turn that never
        waits has ended on return, with no task made): for a caller that will not run
        them with :meth:`drive` (an in-process child, whose waiters must not carry it)."""
        if self._driver_pending:
            self.ctx.undefer(self)  # (a start ``soon`` that has not run yet)
            self._spawn_driver(eager=True)

    async def run(self, content: Content) -> TurnOutcome:
        """Run one turn with ``content`` and wait for it: a convenience for scripts."""
        events = self.session.events
        start = len(events)
        if self._running or self._queue or self._closed:
            self.followup(content)  # behind what is queued (or the error of a closed agent)
            await self.drive()
        else:  # idle: run the turn in this task now, as drive() would, scheduling no driver
            self._queue = deque(((as_blocks(content), None),))
            self._paused = False
            self._running = True
            await self._drive()
        for index in range(len(events) - 1, start - 1, -1):
            event = events[index]
            if event.type == "turn/end":
                return TurnOutcome.of(event)
        raise RuntimeError(f"agent {self.id} went idle without ending a turn")

    def on_close(self, closer: Callable[[], Awaitable[None]]) -> Disposer:
        """Await ``closer()`` when this agent closes, after its turn and jobs have
        stopped (newest first; shielded; a failure is logged). Services that keep
        work alive on the agent's behalf (e.g. continuable children) drain here."""
        if self._closers is None:
            self._closers = []
        self._closers.append(closer)

        def remove() -> None:
            if self._closers is not None and closer in self._closers:
                self._closers.remove(closer)

        return remove

    def close_now(self) -> bool:
        """Close at once if already quiescent (no turn, no running job, no close
        hook); else False."""
        if self._closed:
            return True
        if self._running or self._closers or self.ctx.jobs.has_running(self.id):
            return False
        self._closed = True
        if self._queue:
            self._queue.clear()
        self.session.close()
        if self._forget is not None:
            self._forget(self)
        return True

    async def aclose(self, cause: str = "agent closed") -> None:
        """Cancel any turn, wait until quiescent, release the session. Idempotent;
        a concurrent call returns only once the first has finished."""
        if self._closed:
            if self._closing is not None:
                with anyio.CancelScope(shield=True):
                    await self._closing.wait()
            return
        if self.close_now():
            return
        self._closed = True
        self._closing = closing = asyncio.Event()
        try:
            with anyio.CancelScope(shield=True):
                await self._wind_down(cause)
        finally:
            self.session.close()
            if self._forget is not None:
                self._forget(self)
            closing.set()

    async def _wind_down(self, cause: str) -> None:
        if self._queue:
            self._queue.clear()
        if self._running:
            self._paused = True
            self.cancel(cause)
            await self.when_idle()
        if self.ctx.jobs.has_running(self.id):
            await self.ctx.jobs.kill_owned(self.id, cause)
        while self._closers:
            closer = self._closers.pop()
            try:
                await closer()
            except Exception:
                _log.exception("close hook %r of agent %s failed", closer, self.id)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"agent {self.label or self.id} is closed")

    def _kick(self) -> None:
        if self._running or not self._queue:
            return
        self._running = True
        self._driver_pending = True
        self.ctx.call_soon(self._spawn_driver)

    def _spawn_driver(self, *, eager: bool = False) -> None:
        if not self._driver_pending:
            return  # a caller of drive() is running the turn in its own task
        self._driver_pending = False
        try:
            (self.ctx.start_eager if eager else self.ctx.spawn)(self._drive)
        except RuntimeError:  # the context closed before the turn could start
            self._running = False
            if self._idle is not None:
                self._idle.set()
                self._idle = None

    # -- the loop -----------------------------------------------------------------

    async def _drive(self) -> None:
        try:
            while self._queue and not self._closed:
                await self._run_turn(*self._queue.popleft())
                if self._steer:
                    self._promote_pending()
                if self._paused:
                    break
        finally:
            self._running = False
            self._scope = None
            self._turn_signal = None
            if self._idle is not None:
                self._idle.set()
                self._idle = None

    def _promote_pending(self) -> None:
        """Messages meant for a turn that ended before its next step: injects go
        into the log; the first steer or notice starts the next turn (ahead of
        queued followups) and the rest are delivered at that turn's first step."""
        pending, self._steer = self._steer or [], None
        promoted: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
        for blocks, extra in pending:
            if extra.get("kind") == "inject":
                with contextlib.suppress(SessionError):  # in the log; the next write saves it
                    self._append("user/message", {"content": blocks, **extra})
            else:
                promoted.append((blocks, extra))
        if promoted:
            if self._queue is None:
                self._queue = deque()
            self._queue.appendleft(promoted[0])
            self._steer = promoted[1:] or None


class _Unobserve:
    """The disposer :meth:`Agent.observe` returns (one small object, not a closure)."""

    __slots__ = ("_agent", "_observer")

    def __init__(self, agent: AgentCore, observer: AgentObserver) -> None:
        self._agent = agent
        self._observer = observer

    def __call__(self) -> None:
        self._agent.unobserve(self._observer)
