"""What belongs to a run, and what it emitted: the task watch (see the module docstring
of :mod:`dsh.testing.conformance`), the event recorder, the result checks and the
capability-gate probe."""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import AsyncIterator, Coroutine, Generator
from contextlib import asynccontextmanager
from typing import Any

from dsh.core import Agent, BusEvent, Context
from dsh.subagent import (
    Budget,
    SubagentCapabilities,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    SubagentStartRequest,
    SubagentUsage,
    ToolFilter,
)
from dsh.testing._conformance._harness import (
    PROCESS_BOUND,
    ConformanceHarness,
    counted_children,
    wait_no_new_processes,
)
from dsh.testing._conformance._rules import (
    RULE_DISPOSE,
    RULE_NO_PROCESS,
    RULE_ONE_PAIR,
    RULE_QUIESCENT,
    RULE_USAGE,
    check,
)

__all__ = [
    "EVENT_END",
    "EVENT_START",
    "GATE_REQUESTS",
    "CountingProvider",
    "Recorder",
    "TaskWatch",
    "assert_quiescent",
    "check_disposed_aborted",
    "check_result",
    "observed",
]

EVENT_START = "subagent/start"
EVENT_END = "subagent/end"

_WATCH: contextvars.ContextVar[TaskWatch | None] = contextvars.ContextVar(
    "dsh_testing_conformance_watch", default=None
)


class TaskWatch:
    """Records the tasks created, while it is on, by code running under its mark (the
    test's own code, and every task and callback that code begat). See the module
    docstring."""

    def __init__(self) -> None:
        self._tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: Any = None
        self._token: contextvars.Token[TaskWatch | None] | None = None

    def __enter__(self) -> TaskWatch:
        loop = self._loop = asyncio.get_running_loop()
        self._previous = loop.get_task_factory()
        loop.set_task_factory(self._factory)
        self._token = _WATCH.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _WATCH.reset(self._token)
        loop = self._loop
        if loop is not None and loop.get_task_factory() == self._factory:
            loop.set_task_factory(self._previous)

    def _factory(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        **kwargs: Any,
    ) -> asyncio.Future[Any]:
        previous = self._previous
        task: asyncio.Future[Any] = (
            previous(loop, coro, **kwargs)
            if previous is not None
            else asyncio.Task(coro, loop=loop, **kwargs)
        )
        context = kwargs.get("context")
        watch = context.get(_WATCH) if context is not None else _WATCH.get()
        if watch is self and isinstance(task, asyncio.Task):
            self._tasks.add(task)
        return task

    def pending(self) -> list[asyncio.Task[Any]]:
        """Marked tasks not done yet (the caller's own task excepted)."""
        current = asyncio.current_task()
        return [t for t in self._tasks if not t.done() and t is not current]


def _task_name(task: asyncio.Task[Any]) -> str:
    coro = task.get_coro()
    what = getattr(coro, "__qualname__", None) or type(coro).__name__
    return f"{task.get_name()} ({what})"


def assert_quiescent(run: SubagentRun | None, tasks: TaskWatch, when: str) -> None:
    """The rule of :data:`RULE_QUIESCENT`, checked at once (no loop tick in between)."""
    agent = run.local_agent if run is not None else None
    if agent is not None:
        check(
            not agent.running,
            RULE_QUIESCENT,
            f"{when}, but the child agent {agent.id} is still running",
        )
    pending = tasks.pending()
    check(
        not pending,
        RULE_QUIESCENT,
        lambda: (
            f"{when}, but {len(pending)} task(s) created for the run are still pending: "
            + ", ".join(_task_name(t) for t in pending)
        ),
    )


def check_result(result: object, rule: str) -> SubagentResult:
    check(
        isinstance(result, SubagentResult),
        rule,
        lambda: f"the run settled with a {type(result).__name__}, not a SubagentResult",
    )
    assert isinstance(result, SubagentResult)
    check(
        isinstance(result.usage, SubagentUsage),
        RULE_USAGE,
        lambda: f"result.usage is a {type(result.usage).__name__}: {result.usage!r}",
    )
    if result.diagnostic is not None:
        size = len(result.diagnostic.encode("utf-8", "replace"))
        check(size <= 4096, rule, f"the diagnostic is {size} bytes long (limit 4096)")
    return result


class Recorder:
    """The ``subagent/start`` and ``subagent/end`` events of a context, as they come."""

    def __init__(self, ctx: Context, parent: Agent) -> None:
        self.events: list[BusEvent] = []
        self._offs = [
            ctx.events.on(EVENT_START, self.events.append),
            ctx.events.on(EVENT_END, self.events.append),
        ]
        self.parent = parent

    def close(self) -> None:
        """Stop recording."""
        for off in self._offs:
            off()

    def pairs_for(self, run_id: str) -> list[str]:
        """The types of the events recorded for ``run_id``, in order."""
        return [e.type for e in self.events if e.data.get("run_id") == run_id]

    def check_one_pair(self, run: SubagentRun, when: str) -> None:
        """The rule of exactly one start/end pair for ``run``."""
        pairs = self.pairs_for(run.id)
        check(
            pairs == [EVENT_START, EVENT_END],
            RULE_ONE_PAIR,
            f"{when}, run {run.id} emitted {pairs}",
        )


class CountingProvider:
    """Wraps a provider to count ``start`` calls (registered under another name)."""

    def __init__(self, inner: SubagentProvider) -> None:
        self.inner = inner
        self.name = f"{inner.name}--conformance-probe"
        self.capabilities: SubagentCapabilities = inner.capabilities
        self.inherits_parent_context = inner.inherits_parent_context
        self.calls = 0

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        """Count the call and start with the wrapped provider."""
        self.calls += 1
        return await self.inner.start(request)


GATE_REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("output_schema", {"output_schema": {"type": "object", "properties": {}}}),
    ("depth_limit", {"max_depth": 5}),
    ("tool_filter", {"tool_filter": ToolFilter(deny=())}),
    ("persona", {"persona": "You are a conformance probe."}),
    ("budget", {"budget": Budget(tokens=1000)}),
]
"""A start-request field per capability the gate checks, in the documented order."""


@asynccontextmanager
async def observed(
    harness: ConformanceHarness, *, rule: str = RULE_NO_PROCESS, within: float = PROCESS_BOUND
) -> AsyncIterator[Recorder]:
    """Record the parent's ``subagent/start``/``subagent/end`` events for the block; when
    the block returns, wait until every process it started is gone (broken ``rule``
    after ``within`` seconds)."""
    before = counted_children()
    recorder = Recorder(harness.ctx, harness.parent)
    try:
        yield recorder
    finally:
        recorder.close()
    await wait_no_new_processes(before, within=within, rule=rule)


async def check_disposed_aborted(run: SubagentRun, recorder: Recorder, when: str) -> None:
    """After ``dispose()`` of a working child: disposed, settled ``aborted``, one event pair."""
    check(run.disposed, RULE_DISPOSE, "dispose() returned but run.disposed is False")
    check(run.settled, RULE_DISPOSE, "dispose() returned but the result never settled")
    result = check_result(await run.result, RULE_DISPOSE)
    check(result.stop_reason == "aborted", RULE_DISPOSE, f"it settled {result!r}")
    recorder.check_one_pair(run, when)
