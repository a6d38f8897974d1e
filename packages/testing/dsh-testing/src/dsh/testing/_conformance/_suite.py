""":class:`ProviderConformance`: the tests every provider's conformance subclass runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any, get_args

import anyio
import pytest

from dsh.core import AbortSignal
from dsh.subagent import ProgressKind, SubagentError, SubagentProgress, SubagentRun
from dsh.testing._conformance._harness import (
    ConformanceHarness,
    counted_children,
    wait_no_new_processes,
    wait_running,
)
from dsh.testing._conformance._rules import (
    RULE_ABORT_BEFORE,
    RULE_ABORT_DURING,
    RULE_CANCEL,
    RULE_DISPOSE,
    RULE_FAILURE,
    RULE_GATE,
    RULE_HARNESS,
    RULE_ONE_PAIR,
    RULE_OUTPUT,
    RULE_PROGRESS,
    broken,
    check,
    within,
)
from dsh.testing._conformance._watch import (
    EVENT_END,
    GATE_REQUESTS,
    CountingProvider,
    Recorder,
    TaskWatch,
    assert_quiescent,
    check_disposed_aborted,
    check_result,
    observed,
)

__all__ = ["ProviderConformance"]

_PROGRESS_END_BOUND = 2.0
"""Seconds a ``run.progress()`` iterator may take to end once the run has settled."""
_KINDS = frozenset(get_args(ProgressKind))


async def _settle_then_dispose(run: SubagentRun, bound: float, rule: str, what: str) -> object:
    """The run's result within ``bound`` (else ``rule`` is broken); disposed either way."""
    try:
        return await within(bound, run.result, rule, what)
    finally:
        await run.dispose()


async def _start(
    harness: ConformanceHarness, prompt: str, signal: AbortSignal | None = None
) -> SubagentRun:
    """Start a run of the harness's provider on ``prompt``."""
    return await harness.runtime.start(harness.provider, harness.request(prompt, signal))


async def _start_working(harness: ConformanceHarness) -> SubagentRun:
    """Start a run on the hang prompt and wait until its child is at work."""
    run = await _start(harness, harness.hang_prompt)
    await wait_running(harness, run)
    return run


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
        recorder = Recorder(harness.ctx, harness.parent)
        scoped: list[str] = []
        off = harness.ctx.events.on(
            EVENT_END, lambda e: scoped.append(e.type), scope=harness.parent.id
        )
        try:
            with TaskWatch() as tasks:
                run = await _start(harness, harness.complete_prompt)
                settled = await _settle_then_dispose(
                    run, harness.run_bound, RULE_OUTPUT, "the run never settled"
                )
                assert_quiescent(run, tasks, "dispose() of a completed run returned")
            result = check_result(settled, RULE_OUTPUT)
            check(result.stop_reason == "completed", RULE_OUTPUT, f"it settled {result!r}")
            check(
                harness.output_ok(result.output),
                RULE_OUTPUT,
                f"unexpected output {result.output!r}",
            )
            recorder.check_one_pair(run, "after a completed run")
            end = next(e for e in recorder.events if e.type == EVENT_END)
            check(
                end.scope == harness.parent.id,
                RULE_ONE_PAIR,
                f"subagent/end is scoped to {end.scope!r}, not to the parent",
            )
            check(
                end.data["stop_reason"] == "completed",
                RULE_ONE_PAIR,
                f"subagent/end says {end.data['stop_reason']!r}",
            )
            check(scoped == [EVENT_END], RULE_ONE_PAIR, f"parent-scoped listeners saw {scoped}")
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
        probe = CountingProvider(real)
        remove = runtime.register_provider(probe)
        try:
            async with observed(harness, rule=RULE_GATE, within=0.0) as recorder:
                with TaskWatch() as tasks:
                    lacking = [
                        (cap, fields)
                        for cap, fields in GATE_REQUESTS
                        if not getattr(real.capabilities, cap)
                    ]
                    for capability, fields in lacking:
                        with pytest.raises(SubagentError) as info:
                            await runtime.start(
                                probe.name, harness.request(harness.complete_prompt, **fields)
                            )
                        check(
                            info.value.code == "UNSUPPORTED_CAPABILITY",
                            RULE_GATE,
                            f"a request for {capability} raised {info.value.code}",
                        )
                        expected = f'"{probe.name}" does not support the "{capability}" capability'
                        check(
                            str(info.value) == f"subagent provider {expected}",
                            RULE_GATE,
                            f"unexpected message {str(info.value)!r}",
                        )
                    if lacking:
                        # every field at once: the first lacking one in the documented order
                        everything: dict[str, Any] = {}
                        for _, fields in GATE_REQUESTS:
                            everything.update(fields)
                        with pytest.raises(SubagentError) as info:
                            await runtime.start(
                                probe.name, harness.request(harness.complete_prompt, **everything)
                            )
                        check(
                            f'"{lacking[0][0]}" capability' in str(info.value),
                            RULE_GATE,
                            f"with every field set, the gate named {str(info.value)!r}",
                        )
                    check(
                        probe.calls == 0,
                        RULE_GATE,
                        "provider.start ran although the gate rejected the request",
                    )
                    check(recorder.events == [], RULE_GATE, "a rejected start emitted events")
                    assert_quiescent(None, tasks, "the gate rejected every request")
        finally:
            remove()

    @pytest.mark.anyio
    async def test_abort_before_publication_raises_and_emits_nothing(
        self, harness: ConformanceHarness
    ) -> None:
        async with observed(harness, rule=RULE_ABORT_BEFORE) as recorder:
            with TaskWatch() as tasks:
                signal = AbortSignal()
                signal.abort("caller gave up")
                with pytest.raises(SubagentError) as info:
                    await _start(harness, harness.hang_prompt, signal)
                assert_quiescent(None, tasks, "an aborted start raised")
            check(
                info.value.code == "ABORTED",
                RULE_ABORT_BEFORE,
                f"it raised {info.value.code}: {info.value}",
            )
            check(
                "caller gave up" in str(info.value),
                RULE_ABORT_BEFORE,
                f"the error does not give the abort reason: {info.value}",
            )
            check(recorder.events == [], RULE_ABORT_BEFORE, f"it emitted {recorder.events}")

    @pytest.mark.anyio
    async def test_abort_during_start_either_raises_or_settles_aborted(
        self, harness: ConformanceHarness
    ) -> None:
        async with observed(harness, rule=RULE_ABORT_DURING) as recorder:
            for delay in (0.0, 0.001, 0.01):
                with TaskWatch() as tasks:
                    signal = AbortSignal()
                    outcome: list[SubagentRun | BaseException] = []

                    async def starter(
                        sig: AbortSignal = signal,
                        outcome: list[SubagentRun | BaseException] = outcome,
                    ) -> None:
                        try:
                            outcome.append(await _start(harness, harness.hang_prompt, sig))
                        except SubagentError as exc:
                            outcome.append(exc)

                    async def abort_during_start(
                        delay: float = delay, signal: AbortSignal = signal
                    ) -> None:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(starter)
                            await anyio.sleep(delay)
                            signal.abort("cancelled during start")

                    await within(
                        harness.cancel_bound + harness.run_bound,
                        abort_during_start(),
                        RULE_ABORT_DURING,
                        f"start() did not return after an abort {delay:g} s in",
                    )
                    (first,) = outcome
                    if isinstance(first, SubagentRun):
                        settled = await _settle_then_dispose(
                            first,
                            harness.cancel_bound,
                            RULE_ABORT_DURING,
                            "a run aborted during start did not settle",
                        )
                        assert_quiescent(first, tasks, "dispose() of a run aborted in start")
                        result = check_result(settled, RULE_ABORT_DURING)
                        check(
                            result.stop_reason == "aborted",
                            RULE_ABORT_DURING,
                            f"it settled {result!r}",
                        )
                        recorder.check_one_pair(first, "after an abort during start")
                    else:
                        assert_quiescent(None, tasks, "a start aborted midway raised")
                        check(
                            isinstance(first, SubagentError) and first.code == "ABORTED",
                            RULE_ABORT_DURING,
                            f"start() raised {first!r}",
                        )

    @pytest.mark.anyio
    async def test_cancel_after_publication_settles_aborted_within_bound(
        self, harness: ConformanceHarness
    ) -> None:
        async with observed(harness) as recorder:
            with TaskWatch() as tasks:
                signal = AbortSignal()
                run = await _start(harness, harness.hang_prompt, signal)
                try:
                    await wait_running(harness, run)
                    check(
                        not run.settled,
                        RULE_HARNESS,
                        "the hanging child settled before it was cancelled",
                    )
                    started = time.monotonic()
                    signal.abort("parent cancelled")
                    settled = await within(
                        harness.cancel_bound,
                        run.result,
                        RULE_CANCEL,
                        "the cancelled run did not settle",
                    )
                    elapsed = time.monotonic() - started
                finally:
                    await run.dispose()
                assert_quiescent(run, tasks, "dispose() of a cancelled run returned")
            result = check_result(settled, RULE_CANCEL)
            check(result.stop_reason == "aborted", RULE_CANCEL, f"it settled {result!r}")
            check(
                elapsed <= harness.cancel_bound,
                RULE_CANCEL,
                f"it settled after {elapsed:.2f} s (bound {harness.cancel_bound:g} s)",
            )
            recorder.check_one_pair(run, "after a cancel")

    @pytest.mark.anyio
    async def test_dispose_is_idempotent_concurrent_and_quiescent(
        self, harness: ConformanceHarness
    ) -> None:
        async with observed(harness) as recorder:
            with TaskWatch() as tasks:
                run = await _start_working(harness)

                async def dispose_concurrently_then_again() -> None:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(run.dispose)
                        tg.start_soon(run.dispose)
                    await run.dispose()

                await within(
                    harness.cancel_bound + 10,
                    dispose_concurrently_then_again(),
                    RULE_DISPOSE,
                    "dispose() of a working child did not return",
                )
                assert_quiescent(run, tasks, "dispose() of a working child returned")
            await check_disposed_aborted(run, recorder, "after concurrent dispose() calls")

    @pytest.mark.anyio
    async def test_dispose_twice_with_the_waiter_cancelled_one_tick_later(
        self, harness: ConformanceHarness
    ) -> None:
        async with observed(harness) as recorder:
            with TaskWatch() as tasks:
                run = await _start_working(harness)
                loop = asyncio.get_running_loop()
                first = loop.create_task(run.dispose(), name="conformance: first dispose")
                await asyncio.sleep(0)  # one loop tick: the first dispose is under way
                second = loop.create_task(run.dispose(), name="conformance: second dispose")
                first.cancel()  # the task awaiting the first dispose gives up
                bound = harness.cancel_bound + 10
                await within(
                    bound,
                    asyncio.wait({first, second}),
                    RULE_DISPOSE,
                    "dispose() did not return after its first caller was cancelled",
                )
                check(
                    first.cancelled() or first.exception() is None,
                    RULE_DISPOSE,
                    lambda: f"the first dispose() raised {first.exception()!r}",
                )
                check(
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
                assert_quiescent(run, tasks, "the second dispose() returned")
                await within(bound, run.dispose(), RULE_DISPOSE, "a third dispose() hung")
            await check_disposed_aborted(
                run, recorder, "after a dispose() whose caller was cancelled"
            )

    @pytest.mark.anyio
    async def test_child_failure_settles_error_and_never_raises(
        self, harness: ConformanceHarness
    ) -> None:
        async with observed(harness) as recorder:
            with TaskWatch() as tasks:
                run = await _start(harness, harness.fail_prompt)
                try:
                    settled = await _settle_then_dispose(
                        run, harness.run_bound, RULE_FAILURE, "the failing run never settled"
                    )
                except Exception as exc:
                    raise broken(RULE_FAILURE, f"awaiting the result raised {exc!r}") from exc
                assert_quiescent(run, tasks, "dispose() of a failed run returned")
            result = check_result(settled, RULE_FAILURE)
            check(result.stop_reason == "error", RULE_FAILURE, f"it settled {result!r}")
            check(
                result.diagnostic,
                RULE_FAILURE,
                "a failed run must explain itself in its diagnostic",
            )
            recorder.check_one_pair(run, "after a child failure")

    @pytest.mark.anyio
    async def test_progress_ends_when_the_run_settles(self, harness: ConformanceHarness) -> None:
        before = counted_children()
        for prompt, cancel in ((harness.complete_prompt, False), (harness.hang_prompt, True)):
            with TaskWatch() as tasks:
                signal = AbortSignal()
                run = await _start(harness, prompt, signal)
                items: list[object] = []

                async def read(run: SubagentRun = run, items: list[object] = items) -> None:
                    async for item in run.progress():
                        items.append(item)

                reader = asyncio.get_running_loop().create_task(read())
                try:
                    if cancel:
                        await wait_running(harness, run)
                        signal.abort("parent cancelled")
                        await within(
                            harness.cancel_bound,
                            run.result,
                            RULE_CANCEL,
                            "the cancelled run did not settle",
                        )
                    else:
                        await within(
                            harness.run_bound, run.result, RULE_OUTPUT, "the run never settled"
                        )
                    await within(
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
                assert_quiescent(run, tasks, "dispose() after reading progress returned")
            for item in items:
                check(
                    isinstance(item, SubagentProgress) and item.kind in _KINDS,
                    RULE_PROGRESS,
                    f"run.progress() yielded {item!r}",
                )
        await wait_no_new_processes(before)
