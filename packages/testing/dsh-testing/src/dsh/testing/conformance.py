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

The suite checks: the capability gate runs before ``start`` (and starts no
process); abort before publication raises and emits nothing; cancel after
publication settles ``aborted`` within a bound; ``dispose`` is idempotent,
concurrent-safe and leaves the child quiescent; exactly one
``subagent/start``/``subagent/end`` pair per run, scoped to the parent; the
result never raises for a child failure; no child process is left.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Agent, BusEvent, Context
from dsh.subagent import (
    SubagentCapabilities,
    SubagentError,
    SubagentProvider,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
    ToolFilter,
)
from dsh.testing.processes import describe, live_children, reap_zombies

__all__ = ["ConformanceHarness", "ProviderConformance", "assert_no_new_processes"]

EVENT_START = "subagent/start"
EVENT_END = "subagent/end"


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


def assert_no_new_processes(before: set[int], *, within: float = 1.0) -> None:
    """Assert that every process started since ``before`` is gone (within a grace)."""
    deadline = time.monotonic() + within
    while True:
        reap_zombies()
        extra = live_children() - before
        if not extra:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                "processes left behind:\n" + "\n".join(describe(pid) for pid in sorted(extra))
            )
        time.sleep(0.02)


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
            run = await harness.runtime.start(
                harness.provider, harness.request(harness.complete_prompt)
            )
            try:
                with anyio.fail_after(60):
                    result = await run.result
            finally:
                await run.dispose()
            assert result.stop_reason == "completed", result
            assert harness.output_ok(result.output), f"unexpected output {result.output!r}"
            assert recorder.pairs_for(run.id) == [EVENT_START, EVENT_END]
            end = next(e for e in recorder.events if e.type == EVENT_END)
            assert end.scope == harness.parent.id
            assert end.data["stop_reason"] == "completed"
            assert scoped == [EVENT_END]
            # a second dispose is a no-op
            await run.dispose()
            assert recorder.pairs_for(run.id) == [EVENT_START, EVENT_END]
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
                assert info.value.code == "UNSUPPORTED_CAPABILITY"
                expected = f'"{probe.name}" does not support the "{capability}" capability'
                assert str(info.value) == f"subagent provider {expected}"
            if lacking:
                # every field at once: the first lacking one in the documented order is named
                everything: dict[str, Any] = {}
                for _, fields in _GATE_REQUESTS:
                    everything.update(fields)
                with pytest.raises(SubagentError, match=f'"{lacking[0][0]}" capability'):
                    await runtime.start(
                        probe.name, harness.request(harness.complete_prompt, **everything)
                    )
            assert probe.calls == 0, "provider.start ran although the gate rejected the request"
            assert recorder.events == []
            assert_no_new_processes(before, within=0.0)
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
            signal = AbortSignal()
            signal.abort("caller gave up")
            with pytest.raises(SubagentError) as info:
                await harness.runtime.start(
                    harness.provider, harness.request(harness.hang_prompt, signal)
                )
            assert info.value.code == "ABORTED"
            assert "caller gave up" in str(info.value)
            assert recorder.events == []
            assert_no_new_processes(before)
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
                signal = AbortSignal()
                outcome: list[SubagentRun | BaseException] = []

                async def starter(
                    sig: AbortSignal = signal, outcome: list[SubagentRun | BaseException] = outcome
                ) -> None:
                    try:
                        outcome.append(
                            await harness.runtime.start(
                                harness.provider, harness.request(harness.hang_prompt, sig)
                            )
                        )
                    except SubagentError as exc:
                        outcome.append(exc)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(starter)
                    await anyio.sleep(delay)
                    signal.abort("cancelled during start")
                (first,) = outcome
                if isinstance(first, SubagentRun):
                    with anyio.fail_after(harness.cancel_bound):
                        result = await first.result
                    await first.dispose()
                    assert result.stop_reason == "aborted", result
                    assert recorder.pairs_for(first.id) == [EVENT_START, EVENT_END]
                else:
                    assert isinstance(first, SubagentError), first
                    assert first.code == "ABORTED", first
            assert_no_new_processes(before)
        finally:
            recorder.close()

    @pytest.mark.anyio
    async def test_cancel_after_publication_settles_aborted_within_bound(
        self, harness: ConformanceHarness
    ) -> None:
        before = live_children()
        recorder = _Recorder(harness.ctx, harness.parent)
        try:
            signal = AbortSignal()
            run = await harness.runtime.start(
                harness.provider, harness.request(harness.hang_prompt, signal)
            )
            try:
                await self._wait_running(harness, run)
                assert not run.settled, "the hanging child settled before it was cancelled"
                started = time.monotonic()
                signal.abort("parent cancelled")
                with anyio.fail_after(harness.cancel_bound):
                    result = await run.result
                elapsed = time.monotonic() - started
                assert result.stop_reason == "aborted", result
                assert elapsed <= harness.cancel_bound
            finally:
                await run.dispose()
            assert recorder.pairs_for(run.id) == [EVENT_START, EVENT_END]
            assert_no_new_processes(before)
        finally:
            recorder.close()

    @pytest.mark.anyio
    async def test_dispose_is_idempotent_concurrent_and_quiescent(
        self, harness: ConformanceHarness
    ) -> None:
        before = live_children()
        run = await harness.runtime.start(harness.provider, harness.request(harness.hang_prompt))
        await self._wait_running(harness, run)
        with anyio.fail_after(harness.cancel_bound + 10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run.dispose)
                tg.start_soon(run.dispose)
            await run.dispose()
        assert run.disposed
        assert run.settled, "dispose returned but the result never settled"
        result = await run.result
        assert result.stop_reason == "aborted", result
        if run.local_agent is not None:
            assert not run.local_agent.running
        assert_no_new_processes(before)

    @pytest.mark.anyio
    async def test_child_failure_settles_error_and_never_raises(
        self, harness: ConformanceHarness
    ) -> None:
        before = live_children()
        run = await harness.runtime.start(harness.provider, harness.request(harness.fail_prompt))
        async with run:
            with anyio.fail_after(60):
                result = await run.result
        assert result.stop_reason == "error", result
        assert result.diagnostic, "a failed run must explain itself in its diagnostic"
        assert len(result.diagnostic.encode()) <= 4096
        assert_no_new_processes(before)

    async def _wait_running(self, harness: ConformanceHarness, run: SubagentRun) -> None:
        if harness.wait_until_running is not None:
            with anyio.fail_after(30):
                await harness.wait_until_running(run)
        else:
            await anyio.sleep(harness.start_signal_grace)
