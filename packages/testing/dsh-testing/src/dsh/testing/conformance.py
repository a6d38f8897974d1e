"""The provider conformance suite: the lifecycle rules every provider keeps.

Subclass :class:`ProviderConformance` in your provider's tests and give it a
``harness`` fixture that yields a :class:`ConformanceHarness` (an open context
with your provider registered, a parent agent, and three prompts your child
answers by completing, hanging until cancelled, and failing)::

    class TestMyProvider(ProviderConformance):
        @pytest.fixture
        async def harness(self) -> AsyncIterator[ConformanceHarness]:
            async with Context.open(preset) as ctx:
                ...
                yield ConformanceHarness(ctx, "mine", parent, complete_prompt="say hi",
                                         expected_output="hi", hang_prompt="hang",
                                         fail_prompt="fail")

The rules it checks (a failure reads ``conformance rule '<rule>' broken: <what>``,
never a bare timeout):

* the capability gate runs before ``start`` (and starts nothing);
* abort before publication raises and emits nothing; abort during ``start``
  either raises or settles ``aborted``;
* cancel after publication settles ``aborted`` within ``cancel_bound``;
* ``dispose`` is idempotent and concurrent-safe, also when the task awaiting it
  is cancelled one loop tick after the first call, and it leaves the child
  quiescent: an in-process child agent is no longer running, and no task created
  on behalf of the run is still pending when ``dispose`` returns;
* exactly one ``subagent/start``/``subagent/end`` pair per run, scoped to the parent;
* a completed run has the expected output; a child failure settles ``error`` with
  a diagnostic and never raises; every result's ``usage`` is a ``SubagentUsage``;
* ``run.progress()`` yields progress items and ends once the run has settled;
* no child process is left behind.

Which tasks belong to a run: the suite installs a task factory on the running loop
(``loop.set_task_factory``, public asyncio API) for the length of each test and
marks, with a context variable, the code that starts and disposes the run. A task
is created in its creator's context, and a callback scheduled with ``call_soon``
runs in the context it was scheduled from, so every task the provider creates
for the run, directly or through callbacks (an agent's turn, a kit's driver, a
process's pumps), carries the mark; tasks of unrelated machinery (a fake model
server's connection handlers, other tests) do not. No private attribute of any
provider, agent or context is read. A task meant to outlive runs (a warm pool's, say)
is created in a context of its own (``loop.create_task(coro,
context=contextvars.Context())``) or before the first run.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar, get_args

import anyio
import pytest

from dsh.core import AbortSignal, Agent, BusEvent, Context
from dsh.subagent import (
    ProgressKind,
    SubagentCapabilities,
    SubagentError,
    SubagentProgress,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
    SubagentUsage,
    ToolFilter,
)
from dsh.testing.processes import describe, live_children, reap_zombies

__all__ = ["ConformanceHarness", "ProviderConformance", "assert_no_new_processes"]

T = TypeVar("T")

EVENT_START = "subagent/start"
EVENT_END = "subagent/end"

RULE_OUTPUT = "a completed run settles with its output"
RULE_ONE_PAIR = "exactly one subagent/start and one subagent/end per run"
RULE_GATE = "the capability gate runs before start"
RULE_ABORT_BEFORE = "abort before publication raises and emits nothing"
RULE_ABORT_DURING = "abort during start raises or settles aborted"
RULE_CANCEL = "cancel after publication settles aborted within the bound"
RULE_DISPOSE = "dispose is idempotent and concurrent-safe"
RULE_QUIESCENT = "dispose leaves the child quiescent"
RULE_FAILURE = "a child failure settles error and never raises"
RULE_USAGE = "result.usage is a SubagentUsage"
RULE_PROGRESS = "progress ends when the run settles"
RULE_NO_PROCESS = "no child process is left"
RULE_HARNESS = "the harness's hang prompt keeps the child at work"

_PROGRESS_END_BOUND = 2.0
"""Seconds a ``run.progress()`` iterator may take to end once the run has settled."""
_KINDS = frozenset(get_args(ProgressKind))


def _broken(rule: str, what: str) -> AssertionError:
    return AssertionError(f"conformance rule '{rule}' broken: {what}")


def _check(condition: object, rule: str, what: str | Callable[[], str]) -> None:
    if not condition:
        raise _broken(rule, what() if callable(what) else what)


async def _within(seconds: float, awaitable: Awaitable[T], rule: str, what: str) -> T:
    """``await awaitable`` for at most ``seconds``; past that, the rule is broken."""
    with anyio.move_on_after(seconds):
        return await awaitable
    raise _broken(rule, f"{what} (waited {seconds:g} s)")


@dataclass
class ConformanceHarness:
    """What the suite needs to drive one provider."""

    ctx: Context
    provider: str
    """Registered provider name."""
    parent: Agent
    complete_prompt: str
    """A prompt the child completes."""
    expected_output: str | Callable[[str], bool]
    """The completed output, or a predicate on it."""
    hang_prompt: str
    """A prompt the child keeps working on until cancelled."""
    fail_prompt: str
    """A prompt the child fails on (model error, crash...): settles ``error``."""
    cancel_bound: float = 5.0
    """Seconds within which a cancelled run must settle ``aborted``."""
    wait_until_running: Callable[[SubagentRun], Awaitable[None]] | None = None
    """Wait until the hanging child is really at work (default: a short sleep)."""
    start_signal_grace: float = 0.05
    """Seconds to let a child get going before cancelling when there is no waiter."""
    run_bound: float = 60.0
    """Seconds within which a completing or failing run must settle."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def runtime(self) -> SubagentRuntime:
        """The context's subagent runtime."""
        return SubagentRuntime.of(self.ctx)

    def request(
        self, prompt: str, signal: AbortSignal | None = None, **fields: Any
    ) -> SubagentStartRequest:
        """A start request from the harness's parent."""
        return SubagentStartRequest(prompt, self.parent, signal or AbortSignal(), **fields)

    def output_ok(self, output: str) -> bool:
        """Does ``output`` match what the completing prompt should give?"""
        if callable(self.expected_output):
            return self.expected_output(output)
        return output == self.expected_output


def assert_no_new_processes(
    before: set[int], *, within: float = 1.0, rule: str = RULE_NO_PROCESS
) -> None:
    """Assert that every process started since ``before`` is gone (within a grace)."""
    deadline = time.monotonic() + within
    while True:
        reap_zombies()
        extra = live_children() - before
        if not extra:
            return
        if time.monotonic() > deadline:
            raise _broken(
                rule,
                "processes left behind:\n" + "\n".join(describe(pid) for pid in sorted(extra)),
            )
        time.sleep(0.02)


# -- what belongs to a run ---------------------------------------------------------------

_WATCH: contextvars.ContextVar[_TaskWatch | None] = contextvars.ContextVar(
    "dsh_testing_conformance_watch", default=None
)


class _TaskWatch:
    """Records the tasks created, while it is on, by code running under its mark (the
    test's own code, and every task and callback that code begat). See the module
    docstring."""

    def __init__(self) -> None:
        self._tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: Any = None
        self._token: contextvars.Token[_TaskWatch | None] | None = None

    def __enter__(self) -> _TaskWatch:
        loop = self._loop = asyncio.get_running_loop()
        self._previous = loop.get_task_factory()
        loop.set_task_factory(self._factory)
        self._token = _WATCH.set(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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


def _assert_quiescent(run: SubagentRun | None, tasks: _TaskWatch, when: str) -> None:
    """The rule of :data:`RULE_QUIESCENT`, checked at once (no loop tick in between)."""
    agent = run.local_agent if run is not None else None
    if agent is not None:
        _check(
            not agent.running,
            RULE_QUIESCENT,
            f"{when}, but the child agent {agent.id} is still running",
        )
    pending = tasks.pending()
    _check(
        not pending,
        RULE_QUIESCENT,
        lambda: (
            f"{when}, but {len(pending)} task(s) created for the run are still pending: "
            + ", ".join(_task_name(t) for t in pending)
        ),
    )


def _check_result(result: object, rule: str) -> SubagentResult:
    _check(
        isinstance(result, SubagentResult),
        rule,
        lambda: f"the run settled with a {type(result).__name__}, not a SubagentResult",
    )
    assert isinstance(result, SubagentResult)
    _check(
        isinstance(result.usage, SubagentUsage),
        RULE_USAGE,
        lambda: f"result.usage is a {type(result.usage).__name__}: {result.usage!r}",
    )
    if result.diagnostic is not None:
        size = len(result.diagnostic.encode("utf-8", "replace"))
        _check(size <= 4096, rule, f"the diagnostic is {size} bytes long (limit 4096)")
    return result


class _Recorder:
    def __init__(self, ctx: Context, parent: Agent) -> None:
        self.events: list[BusEvent] = []
        self._offs = [
            ctx.events.on(EVENT_START, self.events.append),
            ctx.events.on(EVENT_END, self.events.append),
        ]
        self.parent = parent

    def close(self) -> None:
        for off in self._offs:
            off()

    def pairs_for(self, run_id: str) -> list[str]:
        return [e.type for e in self.events if e.data.get("run_id") == run_id]

    def check_one_pair(self, run: SubagentRun, when: str) -> None:
        pairs = self.pairs_for(run.id)
        _check(
            pairs == [EVENT_START, EVENT_END],
            RULE_ONE_PAIR,
            f"{when}, run {run.id} emitted {pairs}",
        )


class _CountingProvider:
    """Wraps a provider to count ``start`` calls (registered under another name)."""

    def __init__(self, inner: SubagentProvider) -> None:
        self.inner = inner
        self.name = f"{inner.name}--conformance-probe"
        self.capabilities: SubagentCapabilities = inner.capabilities
        self.inherits_parent_context = inner.inherits_parent_context
        self.calls = 0

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        self.calls += 1
        return await self.inner.start(request)


_GATE_REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("output_schema", {"output_schema": {"type": "object", "properties": {}}}),
    ("depth_limit", {"max_depth": 5}),
    ("tool_filter", {"tool_filter": ToolFilter(deny=())}),
    ("persona", {"persona": "You are a conformance probe."}),
]


class ProviderConformance:
    """Base class of the suite; subclass it and define a ``harness`` fixture."""

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        """Override in the subclass (usually an async generator fixture)."""
        raise NotImplementedError("define a `harness` fixture in your conformance subclass")

    @pytest.mark.anyio
    async def test_completes_with_output_and_one_event_pair(
        self, harness: ConformanceHarness
    ) -> None:
        recorder = _Recorder(harness.ctx, harness.parent)
        scoped: list[str] = []
        off = harness.ctx.events.on(
            EVENT_END, lambda e: scoped.append(e.type), scope=harness.parent.id
        )
        try:
            with _TaskWatch() as tasks:
                run = await harness.runtime.start(
                    harness.provider, harness.request(harness.complete_prompt)
                )
                try:
                    result = await _within(
                        harness.run_bound, run.result, RULE_OUTPUT, "the run never settled"
                    )
                finally:
                    await run.dispose()
                _assert_quiescent(run, tasks, "dispose() of a completed run returned")
            result = _check_result(result, RULE_OUTPUT)
            _check(result.stop_reason == "completed", RULE_OUTPUT, f"it settled {result!r}")
            _check(
                harness.output_ok(result.output),
                RULE_OUTPUT,
                f"unexpected output {result.output!r}",
            )
            recorder.check_one_pair(run, "after a completed run")
            end = next(e for e in recorder.events if e.type == EVENT_END)
            _check(
                end.scope == harness.parent.id,
                RULE_ONE_PAIR,
                f"subagent/end is scoped to {end.scope!r}, not to the parent",
            )
            _check(
                end.data["stop_reason"] == "completed",
                RULE_ONE_PAIR,
                f"subagent/end says {end.data['stop_reason']!r}",
            )
            _check(scoped == [EVENT_END], RULE_ONE_PAIR, f"parent-scoped listeners saw {scoped}")
            await run.dispose()  # a second dispose is a no-op
            recorder.check_one_pair(run, "after a second dispose()")
        finally:
            recorder.close()
            off()

    @pytest.mark.anyio
    async def test_capability_gate_runs_before_start(self, harness: ConformanceHarness) -> None:
        runtime = harness.runtime
        real = runtime.get_provider(harness.provider)
        assert real is not None, f"provider {harness.provider!r} is not registered"
        probe = _CountingProvider(real)
        remove = runtime.register_provider(probe)
        recorder = _Recorder(harness.ctx, harness.parent)
        before = live_children()
        try:
            with _TaskWatch() as tasks:
                lacking = [
                    (cap, fields)
                    for cap, fields in _GATE_REQUESTS
                    if not getattr(real.capabilities, cap)
                ]
                for capability, fields in lacking:
                    with pytest.raises(SubagentError) as info:
                        await runtime.start(
                            probe.name, harness.request(harness.complete_prompt, **fields)
                        )
                    _check(
                        info.value.code == "UNSUPPORTED_CAPABILITY",
                        RULE_GATE,
                        f"a request for {capability} raised {info.value.code}",
                    )
                    expected = f'"{probe.name}" does not support the "{capability}" capability'
                    _check(
                        str(info.value) == f"subagent provider {expected}",
                        RULE_GATE,
                        f"unexpected message {str(info.value)!r}",
                    )
                if lacking:
                    # every field at once: the first lacking one in the documented order
                    everything: dict[str, Any] = {}
                    for _, fields in _GATE_REQUESTS:
                        everything.update(fields)
                    with pytest.raises(SubagentError) as info:
                        await runtime.start(
                            probe.name, harness.request(harness.complete_prompt, **everything)
                        )
                    _check(
                        f'"{lacking[0][0]}" capability' in str(info.value),
                        RULE_GATE,
                        f"with every field set, the gate named {str(info.value)!r}",
                    )
                _check(
                    probe.calls == 0,
                    RULE_GATE,
                    "provider.start ran although the gate rejected the request",
                )
                _check(recorder.events == [], RULE_GATE, "a rejected start emitted events")
                _assert_quiescent(None, tasks, "the gate rejected every request")
            assert_no_new_processes(before, within=0.0, rule=RULE_GATE)
        finally:
            remove()
            recorder.close()

    @pytest.mark.anyio
    async def test_abort_before_publication_raises_and_emits_nothing(
        self, harness: ConformanceHarness
    ) -> None:
        recorder = _Recorder(harness.ctx, harness.parent)
        before = live_children()
        try:
            with _TaskWatch() as tasks:
                signal = AbortSignal()
                signal.abort("caller gave up")
                with pytest.raises(SubagentError) as info:
                    await harness.runtime.start(
                        harness.provider, harness.request(harness.hang_prompt, signal)
                    )
                _assert_quiescent(None, tasks, "an aborted start raised")
            _check(
                info.value.code == "ABORTED",
                RULE_ABORT_BEFORE,
                f"it raised {info.value.code}: {info.value}",
            )
            _check(
                "caller gave up" in str(info.value),
                RULE_ABORT_BEFORE,
                f"the error does not give the abort reason: {info.value}",
            )
            _check(recorder.events == [], RULE_ABORT_BEFORE, f"it emitted {recorder.events}")
            assert_no_new_processes(before, rule=RULE_ABORT_BEFORE)
        finally:
            recorder.close()

    @pytest.mark.anyio
    async def test_abort_during_start_either_raises_or_settles_aborted(
        self, harness: ConformanceHarness
    ) -> None:
        recorder = _Recorder(harness.ctx, harness.parent)
        before = live_children()
        try:
            for delay in (0.0, 0.001, 0.01):
                with _TaskWatch() as tasks:
                    signal = AbortSignal()
                    outcome: list[SubagentRun | BaseException] = []

                    async def starter(
                        sig: AbortSignal = signal,
                        outcome: list[SubagentRun | BaseException] = outcome,
                    ) -> None:
                        try:
                            outcome.append(
                                await harness.runtime.start(
                                    harness.provider, harness.request(harness.hang_prompt, sig)
                                )
                            )
                        except SubagentError as exc:
                            outcome.append(exc)

                    async def abort_during_start(
                        delay: float = delay, signal: AbortSignal = signal
                    ) -> None:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(starter)
                            await anyio.sleep(delay)
                            signal.abort("cancelled during start")

                    await _within(
                        harness.cancel_bound + harness.run_bound,
                        abort_during_start(),
                        RULE_ABORT_DURING,
                        f"start() did not return after an abort {delay:g} s in",
                    )
                    (first,) = outcome
                    if isinstance(first, SubagentRun):
                        try:
                            result = await _within(
                                harness.cancel_bound,
                                first.result,
                                RULE_ABORT_DURING,
                                "a run aborted during start did not settle",
                            )
                        finally:
                            await first.dispose()
                        _assert_quiescent(first, tasks, "dispose() of a run aborted in start")
                        result = _check_result(result, RULE_ABORT_DURING)
                        _check(
                            result.stop_reason == "aborted",
                            RULE_ABORT_DURING,
                            f"it settled {result!r}",
                        )
                        recorder.check_one_pair(first, "after an abort during start")
                    else:
                        _assert_quiescent(None, tasks, "a start aborted midway raised")
                        _check(
                            isinstance(first, SubagentError) and first.code == "ABORTED",
                            RULE_ABORT_DURING,
                            f"start() raised {first!r}",
                        )
            assert_no_new_processes(before, rule=RULE_ABORT_DURING)
        finally:
            recorder.close()

    @pytest.mark.anyio
    async def test_cancel_after_publication_settles_aborted_within_bound(
        self, harness: ConformanceHarness
    ) -> None:
        before = live_children()
        recorder = _Recorder(harness.ctx, harness.parent)
        try:
            with _TaskWatch() as tasks:
                signal = AbortSignal()
                run = await harness.runtime.start(
                    harness.provider, harness.request(harness.hang_prompt, signal)
                )
                try:
                    await self._wait_running(harness, run)
                    _check(
                        not run.settled,
                        RULE_HARNESS,
                        "the hanging child settled before it was cancelled",
                    )
                    started = time.monotonic()
                    signal.abort("parent cancelled")
                    result = await _within(
                        harness.cancel_bound,
                        run.result,
                        RULE_CANCEL,
                        "the cancelled run did not settle",
                    )
                    elapsed = time.monotonic() - started
                finally:
                    await run.dispose()
                _assert_quiescent(run, tasks, "dispose() of a cancelled run returned")
            result = _check_result(result, RULE_CANCEL)
            _check(result.stop_reason == "aborted", RULE_CANCEL, f"it settled {result!r}")
            _check(
                elapsed <= harness.cancel_bound,
                RULE_CANCEL,
                f"it settled after {elapsed:.2f} s (bound {harness.cancel_bound:g} s)",
            )
            recorder.check_one_pair(run, "after a cancel")
            assert_no_new_processes(before)
        finally:
            recorder.close()

    @pytest.mark.anyio
    async def test_dispose_is_idempotent_concurrent_and_quiescent(
        self, harness: ConformanceHarness
    ) -> None:
        before = live_children()
        recorder = _Recorder(harness.ctx, harness.parent)
        try:
            with _TaskWatch() as tasks:
                run = await harness.runtime.start(
                    harness.provider, harness.request(harness.hang_prompt)
                )
                await self._wait_running(harness, run)

                async def dispose_concurrently_then_again() -> None:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(run.dispose)
                        tg.start_soon(run.dispose)
                    await run.dispose()

                await _within(
                    harness.cancel_bound + 10,
                    dispose_concurrently_then_again(),
                    RULE_DISPOSE,
                    "dispose() of a working child did not return",
                )
                _assert_quiescent(run, tasks, "dispose() of a working child returned")
            _check(run.disposed, RULE_DISPOSE, "dispose() returned but run.disposed is False")
            _check(run.settled, RULE_DISPOSE, "dispose() returned but the result never settled")
            result = _check_result(await run.result, RULE_DISPOSE)
            _check(result.stop_reason == "aborted", RULE_DISPOSE, f"it settled {result!r}")
            recorder.check_one_pair(run, "after concurrent dispose() calls")
            assert_no_new_processes(before)
        finally:
            recorder.close()

    @pytest.mark.anyio
    async def test_dispose_twice_with_the_waiter_cancelled_one_tick_later(
        self, harness: ConformanceHarness
    ) -> None:
        before = live_children()
        recorder = _Recorder(harness.ctx, harness.parent)
        try:
            with _TaskWatch() as tasks:
                run = await harness.runtime.start(
                    harness.provider, harness.request(harness.hang_prompt)
                )
                await self._wait_running(harness, run)
                loop = asyncio.get_running_loop()
                first = loop.create_task(run.dispose(), name="conformance: first dispose")
                await asyncio.sleep(0)  # one loop tick: the first dispose is under way
                second = loop.create_task(run.dispose(), name="conformance: second dispose")
                first.cancel()  # the task awaiting the first dispose gives up
                bound = harness.cancel_bound + 10
                await _within(
                    bound,
                    asyncio.wait({first, second}),
                    RULE_DISPOSE,
                    "dispose() did not return after its first caller was cancelled",
                )
                _check(
                    first.cancelled() or first.exception() is None,
                    RULE_DISPOSE,
                    lambda: f"the first dispose() raised {first.exception()!r}",
                )
                _check(
                    not second.cancelled() and second.exception() is None,
                    RULE_DISPOSE,
                    lambda: (
                        "the second dispose() "
                        + (
                            "was cancelled"
                            if second.cancelled()
                            else f"raised {second.exception()!r}"
                        )
                    ),
                )
                _assert_quiescent(run, tasks, "the second dispose() returned")
                await _within(bound, run.dispose(), RULE_DISPOSE, "a third dispose() hung")
            _check(run.disposed, RULE_DISPOSE, "dispose() returned but run.disposed is False")
            _check(run.settled, RULE_DISPOSE, "dispose() returned but the result never settled")
            result = _check_result(await run.result, RULE_DISPOSE)
            _check(result.stop_reason == "aborted", RULE_DISPOSE, f"it settled {result!r}")
            recorder.check_one_pair(run, "after a dispose() whose caller was cancelled")
            assert_no_new_processes(before)
        finally:
            recorder.close()

    @pytest.mark.anyio
    async def test_child_failure_settles_error_and_never_raises(
        self, harness: ConformanceHarness
    ) -> None:
        before = live_children()
        recorder = _Recorder(harness.ctx, harness.parent)
        try:
            with _TaskWatch() as tasks:
                run = await harness.runtime.start(
                    harness.provider, harness.request(harness.fail_prompt)
                )
                try:
                    result = await _within(
                        harness.run_bound, run.result, RULE_FAILURE, "the failing run never settled"
                    )
                except Exception as exc:
                    raise _broken(RULE_FAILURE, f"awaiting the result raised {exc!r}") from exc
                finally:
                    await run.dispose()
                _assert_quiescent(run, tasks, "dispose() of a failed run returned")
            result = _check_result(result, RULE_FAILURE)
            _check(result.stop_reason == "error", RULE_FAILURE, f"it settled {result!r}")
            _check(
                result.diagnostic,
                RULE_FAILURE,
                "a failed run must explain itself in its diagnostic",
            )
            recorder.check_one_pair(run, "after a child failure")
            assert_no_new_processes(before)
        finally:
            recorder.close()

    @pytest.mark.anyio
    async def test_progress_ends_when_the_run_settles(self, harness: ConformanceHarness) -> None:
        before = live_children()
        for prompt, cancel in ((harness.complete_prompt, False), (harness.hang_prompt, True)):
            with _TaskWatch() as tasks:
                signal = AbortSignal()
                run = await harness.runtime.start(harness.provider, harness.request(prompt, signal))
                items: list[object] = []

                async def read(run: SubagentRun = run, items: list[object] = items) -> None:
                    async for item in run.progress():
                        items.append(item)

                reader = asyncio.get_running_loop().create_task(read())
                try:
                    if cancel:
                        await self._wait_running(harness, run)
                        signal.abort("parent cancelled")
                        await _within(
                            harness.cancel_bound,
                            run.result,
                            RULE_CANCEL,
                            "the cancelled run did not settle",
                        )
                    else:
                        await _within(
                            harness.run_bound, run.result, RULE_OUTPUT, "the run never settled"
                        )
                    await _within(
                        _PROGRESS_END_BOUND,
                        asyncio.wait({reader}),
                        RULE_PROGRESS,
                        f"run.progress() did not end after the run settled ({len(items)} item(s)"
                        " read)",
                    )
                    reader.result()
                finally:
                    reader.cancel()
                    await run.dispose()
                _assert_quiescent(run, tasks, "dispose() after reading progress returned")
            for item in items:
                _check(
                    isinstance(item, SubagentProgress) and item.kind in _KINDS,
                    RULE_PROGRESS,
                    f"run.progress() yielded {item!r}",
                )
        assert_no_new_processes(before)

    async def _wait_running(self, harness: ConformanceHarness, run: SubagentRun) -> None:
        if harness.wait_until_running is not None:
            await _within(
                30, harness.wait_until_running(run), RULE_HARNESS, "wait_until_running never ended"
            )
        else:
            await anyio.sleep(harness.start_signal_grace)
