"""Admission control: caps on running children, a FIFO queue, the descendants budget.

The runtime passes every one-shot start through the *gates* of its provider: a
provider gate (that provider's cap) and the context gate (``max_running``, all
providers together). A run holds a slot in each from admission until its dispose
has finished. When a gate is full, ``start`` publishes a :class:`QueuedHandle`'s
run at once, in state ``queued``; it starts the provider when a slot frees up, in
the order the runs were queued, and then forwards the inner run's progress,
result and dispose. With room (or no cap at all) ``start`` takes the fast path:
the provider's own run, no wrapper.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dsh.core.sessions import new_session_id
from dsh.subagent._diagnostics import redact_secrets
from dsh.subagent._errors import StartAborted, SubagentError
from dsh.subagent._progress import SubagentProgress
from dsh.subagent._run import RunHandle, SubagentRun, handle_of
from dsh.subagent._types import SubagentResult, SubagentStartRequest

if TYPE_CHECKING:
    from dsh.subagent._meter import BudgetMeter
    from dsh.subagent._provider import SubagentProvider

__all__ = ["Admission", "Gate", "GatesOf", "QueuedHandle", "Started", "process_max_running"]

_log = logging.getLogger("dsh.subagent.admission")


def process_max_running() -> int:
    """The default cap of a provider whose children are local processes: the number
    of CPU cores this process may use (``os.process_cpu_count()`` where Python has it,
    else the scheduler affinity, else ``os.cpu_count()``; at least 1)."""
    counter = getattr(os, "process_cpu_count", None)
    count: int | None = counter() if counter is not None else None
    if count is None and hasattr(os, "sched_getaffinity"):
        count = len(os.sched_getaffinity(0))
    if count is None:
        count = os.cpu_count()
    return max(count or 1, 1)


class Gate:
    """One cap: at most ``limit`` runs hold a slot at once (``running``)."""

    __slots__ = ("limit", "name", "running")

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.running = 0

    def __repr__(self) -> str:
        return f"<Gate {self.name} {self.running}/{self.limit}>"


def has_room(gates: tuple[Gate, ...]) -> bool:
    """True if every gate has a free slot."""
    for gate in gates:  # noqa: SIM110 (the start path: a loop beats all() over a genexpr)
        if gate.running >= gate.limit:
            return False
    return True


GatesOf = Callable[[str, SubagentStartRequest], tuple[Gate, ...]]
"""The gates a request to provider ``name`` passes now (the runtime's lookup)."""
Started = Callable[[RunHandle, RunHandle, tuple[Gate, ...]], None]
"""Told ``(outer, inner, gates)`` when a queued run's provider run has started."""
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], "asyncio.Task[None]"]


class Admission:
    """The runtime's gates and its queue of runs waiting for a slot.

    It knows the runtime only through narrow callables: ``gates_of`` (a queued
    request's gates after the caps changed), ``spawn`` (a task owned by the
    context), ``draining`` (no more admissions), ``refund`` (give back a run's
    place in the descendants budget) and ``started`` (a queued run got its inner
    run, so the runtime can attach its child agent).
    """

    __slots__ = (
        "_context_gate",
        "_draining",
        "_gates",
        "_gates_of",
        "_refund",
        "_spawn",
        "_started",
        "queue",
    )

    def __init__(
        self,
        *,
        gates_of: GatesOf,
        spawn: Spawn,
        draining: Callable[[], bool],
        refund: Callable[[str | None], None],
        started: Started,
    ) -> None:
        self._gates_of = gates_of
        self._spawn = spawn
        self._draining = draining
        self._refund = refund
        self._started = started
        self._context_gate: Gate | None = None
        self._gates: dict[str, Gate] = {}
        """Provider gates by provider name (kept while runs hold slots in them)."""
        self.queue: dict[QueuedHandle, None] = {}
        """Runs waiting for a slot, oldest first."""

    # -- configuration ---------------------------------------------------------------

    @property
    def context_limit(self) -> int | None:
        """The context cap (None: none)."""
        gate = self._context_gate
        return gate.limit if gate is not None else None

    def configure(self, max_running: int | None) -> None:
        """Set the context cap (None: none). Runs holding slots keep them; queued runs
        are re-gated (and admitted if the new caps leave room)."""
        if max_running is None:
            self._context_gate = None
        elif self._context_gate is None:
            self._context_gate = Gate("max_running", max_running)
        else:
            self._context_gate.limit = max_running
        self.regate()

    def gates_for(self, name: str, limit: int | None) -> tuple[Gate, ...]:
        """The gates a run of provider ``name`` with cap ``limit`` passes through."""
        gates: tuple[Gate, ...] = ()
        if limit is not None:
            gate = self._gates.get(name)
            if gate is None:
                gate = self._gates[name] = Gate(name, limit)
            else:
                gate.limit = limit
            gates = (gate,)
        if self._context_gate is not None:
            gates = (*gates, self._context_gate)
        return gates

    def running(self, name: str | None = None) -> int:
        """Slots held: by provider ``name``, or (None) in the whole context."""
        if name is None:
            gate = self._context_gate
            if gate is not None:
                return gate.running
            return sum(g.running for g in self._gates.values())
        found = self._gates.get(name)
        return found.running if found is not None else 0

    # -- slots -----------------------------------------------------------------------

    @property
    def capped(self) -> bool:
        """True when any cap is set (else starts skip admission entirely)."""
        return self._context_gate is not None or bool(self._gates)

    @staticmethod
    def take(gates: tuple[Gate, ...]) -> None:
        """Take a slot in each of ``gates`` (the caller checked :func:`has_room`)."""
        for gate in gates:
            gate.running += 1

    def release(self, gates: tuple[Gate, ...]) -> None:
        """Give back the slots of a run whose dispose has finished; admit the next."""
        for gate in gates:
            gate.running -= 1
        if self.queue:
            self.pump()

    # -- the queue -------------------------------------------------------------------

    def enqueue(self, handle: QueuedHandle) -> None:
        """Put ``handle`` at the end of the queue and tell it its position."""
        self.queue[handle] = None
        handle.position = self._position_of(handle)

    def leave(self, handle: QueuedHandle) -> None:
        """Take ``handle`` out of the queue (aborted or disposed while queued)."""
        if self.queue.pop(handle, 0) is None:
            self.pump(moved=True)

    def abandon(self, reason: str) -> None:
        """Settle every queued run ``aborted`` with ``reason`` (the runtime closes)."""
        for handle in list(self.queue):
            handle.finish_queued(reason)

    def regate(self) -> None:
        """The caps changed: queued runs wait for their providers' new gates."""
        for handle in self.queue:
            request = handle.request
            if request is not None:
                handle.gates = self._gates_of(handle.provider, request)
        self.pump(moved=True)

    def pump(self, *, moved: bool = False) -> None:
        """Admit queued runs, oldest first, while their gates have room; then tell the
        ones still waiting their new positions (also when ``moved``: a run left)."""
        queue = self.queue
        if not queue or self._draining():
            return
        admitted: list[QueuedHandle] = []
        context_gate = self._context_gate
        for handle in queue:
            if context_gate is not None and context_gate.running >= context_gate.limit:
                break
            if has_room(handle.gates):
                self.take(handle.gates)
                admitted.append(handle)
        for handle in admitted:
            del queue[handle]
        if admitted or moved:
            self._update_positions()
        for handle in admitted:
            handle.admit()

    def _update_positions(self) -> None:
        for handle, position in self._positions():
            if handle.position != position:
                handle.position = position
                if handle.wants_progress:
                    handle.emit(handle.queued_item())

    def _positions(self) -> Iterator[tuple[QueuedHandle, int]]:
        """Each queued run's position: 1 + the runs queued before it that wait for a
        slot in one of its gates."""
        if self._context_gate is not None:  # every run waits for that one
            for index, handle in enumerate(self.queue):
                yield handle, index + 1
            return
        counts: dict[Gate | None, int] = {}
        for handle in self.queue:
            gate = handle.gates[0] if handle.gates else None
            position = counts.get(gate, 0) + 1
            counts[gate] = position
            yield handle, position

    def _position_of(self, handle: QueuedHandle) -> int:
        for other, position in self._positions():
            if other is handle:
                return position
        return 0


_QUEUED = "queued"
_STARTING = "starting"
_RUNNING = "running"
_DONE = "done"


class QueuedHandle(RunHandle):
    """A run published while its provider's gates were full.

    States: ``queued`` (waiting; ``position`` 1 = next), ``starting`` (admitted,
    ``provider.start`` in flight), ``running`` (the provider's run is the *inner*
    run; this one forwards its progress, result and dispose), ``done``.

    Aborting while queued (the request's signal, or dispose) settles ``aborted``
    and starts nothing. A provider whose start fails settles this run ``error``
    (``aborted`` when the start was aborted) with the reason in the diagnostic.
    """

    __slots__ = (
        "_admission",
        "_inner_signal",
        "_queued_at",
        "_task",
        "_unlink",
        "_unwatch",
        "charged",
        "gates",
        "inner",
        "position",
        "provider_obj",
        "request",
        "root",
        "state",
    )

    def __init__(
        self,
        admission: Admission,
        provider: SubagentProvider,
        request: SubagentStartRequest,
        gates: tuple[Gate, ...],
    ) -> None:
        super().__init__(new_session_id(), provider=provider.name, label=request.label)
        self._admission = admission
        self.provider_obj: SubagentProvider | None = provider
        signal, self._unlink = request.signal.linked()
        self._inner_signal = signal
        self.request: SubagentStartRequest | None = dataclasses.replace(request, signal=signal)
        self.gates = gates
        self.inner: SubagentRun | None = None
        self.state = _QUEUED
        self.position = 0
        self.root: str | None = None
        """The root agent whose descendants budget this run was counted in."""
        self.charged: BudgetMeter | None = None
        """The budget meter this run was counted in as a delegation (``children``)."""
        self._queued_at = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._unwatch = signal.on_abort(self._on_abort)

    # -- the queue ------------------------------------------------------------------

    def queued_item(self) -> SubagentProgress:
        """This run's place in the queue, as a progress item."""
        return SubagentProgress("queued", position=self.position)

    def _on_abort(self, reason: str) -> None:
        if self.state != _QUEUED:
            return  # starting or running: the provider has the signal
        self.finish_queued(f"subagent run cancelled while queued: {reason}")

    def finish_queued(self, reason: str) -> None:
        """Leave the queue and settle ``aborted`` with ``reason`` (nothing started)."""
        self.state = _DONE
        self._admission.leave(self)
        self._let_go()
        self.settle(SubagentResult.aborted(reason))

    def admit(self) -> None:
        """A slot is ours (already taken): start the provider in a context task."""
        self.state = _STARTING
        try:
            task = self._admission._spawn(self._start)
        except RuntimeError as exc:  # the context is not open any more
            self._start_failed(exc)
            return
        self._task = task
        task.add_done_callback(self._start_done)

    async def _start(self) -> None:
        provider, request = self.provider_obj, self.request
        assert provider is not None
        assert request is not None
        try:
            run = await provider.start(request)
        except BaseException as exc:
            self._start_failed(exc)
            if not isinstance(exc, Exception):
                raise
            return
        self._running(run)

    def _start_done(self, task: asyncio.Task[None]) -> None:
        self._task = None
        if self.state == _STARTING:  # cancelled before it ran a step
            self._start_failed(asyncio.CancelledError())

    def _start_failed(self, exc: BaseException) -> None:
        self.state = _DONE
        self._admission._refund(self.root)
        if self.charged is not None:
            self.charged.refund_child()
        self._admission.release(self.gates)
        signal = self._inner_signal
        if signal.aborted or isinstance(exc, StartAborted):
            result = SubagentResult.aborted(
                f"subagent run cancelled before it started: {signal.reason or exc}"
            )
        elif isinstance(exc, SubagentError):
            result = SubagentResult.failed(f"subagent could not start: {exc.message}")
        elif isinstance(exc, Exception):
            result = SubagentResult.failed(
                redact_secrets(f"subagent could not start: {type(exc).__name__}: {exc}")
            )
        else:
            result = SubagentResult.aborted("the context closed before the run started")
        self._let_go()
        self.settle(result)

    def _running(self, run: SubagentRun) -> None:
        self.inner = run
        self.state = _RUNNING
        inner = handle_of(run)
        admission = self._admission
        gates = self.gates
        inner.on_disposed(lambda: admission.release(gates))
        child = inner.local_agent
        if child is not None:
            self._local_agent = child
            admission._started(self, inner, gates)
        if self._wanted:
            inner.set_sink(self._forward)
        waited = time.monotonic() - self._queued_at
        self.emit(SubagentProgress("notice", text=f"started after {waited:.1f} s in the queue"))
        inner.on_settled(self._inner_settled)

    def _forward(self, inner: RunHandle, item: SubagentProgress) -> None:
        self.emit(item)

    def _inner_settled(self, result: SubagentResult | None, error: BaseException | None) -> None:
        if error is not None:
            self.fail(error)
        elif result is not None:
            self.settle(result)

    def _let_go(self) -> None:
        self._unlink()
        self._unlink = _noop
        self._unwatch()
        self._unwatch = _noop
        self.provider_obj = None
        self.request = None

    # -- RunHandle hooks ------------------------------------------------------------

    def _late_items(self) -> Iterable[SubagentProgress]:
        if self.state == _QUEUED:
            return (self.queued_item(),)  # a late subscriber learns where it stands
        return ()

    def _start_progress(self) -> Callable[[], None] | None:
        if self.state == _QUEUED:
            self.emit(self.queued_item())
        elif self.state == _RUNNING and self.inner is not None:
            handle_of(self.inner).set_sink(self._forward)
        return None

    def _teardown_now(self) -> bool:
        if self.state == _QUEUED:
            self.finish_queued("subagent run disposed while queued")
            return True
        return self.state == _DONE and self.inner is None

    async def _teardown(self) -> None:
        task = self._task
        if self.state == _STARTING and task is not None:
            self._inner_signal.abort("subagent run disposed")
            await asyncio.wait((task,))
        inner = self.inner
        try:
            if inner is not None:
                await inner.dispose()
        finally:
            self.inner = None
            self._let_go()


def _noop() -> None:
    return None
