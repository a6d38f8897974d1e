"""``Context.spawn(eager=True)``: on Python 3.12+ the task's first step runs at once, so a
coroutine that never suspends is done on return; on 3.11 it is an ordinary context task.
``Context.start_eager``: the first step at once on every Python, as a task of its own
that exists only if the coroutine suspends (an in-process child whose turn never waits
costs no task and no loop iteration)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys

import anyio
import pytest

from dsh.core import Context, parse_preset

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]

EAGER = sys.version_info >= (3, 12)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_coroutine_that_never_suspends_is_done_on_return_where_python_can() -> None:
    steps: list[str] = []

    async def quick() -> str:
        steps.append("ran")
        return "done"

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        task = ctx.spawn(quick, eager=True)
        assert task.done() is EAGER
        assert steps == (["ran"] if EAGER else [])
        assert await task == "done"


async def test_an_eager_task_that_suspends_is_owned_and_cancelled_by_the_context() -> None:
    started = anyio.Event()

    async def slow() -> None:
        started.set()
        await anyio.sleep(30)

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        task = ctx.spawn(slow, eager=True)
        with anyio.fail_after(5):
            await started.wait()
        assert not task.done()
    assert task.cancelled()  # closing the context cancelled it


async def test_an_eager_failure_is_the_task_s_exception() -> None:
    async def boom() -> None:
        raise ValueError("bad")

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        task = ctx.spawn(boom, eager=True)
        with pytest.raises(ValueError, match="bad"):
            await asyncio.wait_for(task, 5)


# -- Context.start_eager: a first step at once on every Python, no task unless it suspends


async def test_start_eager_finishes_a_coroutine_that_never_suspends_without_a_task() -> None:
    steps: list[object] = []

    async def quick() -> None:
        steps.append(asyncio.current_task())

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        me = asyncio.current_task()
        before = len(asyncio.all_tasks())
        ctx.start_eager(quick)
        ctx.start_eager(quick)
        assert asyncio.current_task() is me
        assert len(steps) == 2
        assert steps[0] is not me
        assert steps[0] is steps[1]  # the parked carrier lent itself twice
        assert len(asyncio.all_tasks()) <= before + 1  # (one parked carrier at most)


async def test_start_eager_runs_the_first_step_as_the_task_that_carries_the_rest() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="caller")
    seen: list[object] = []
    done = anyio.Event()

    async def body() -> None:
        seen.append(asyncio.current_task())
        var.set("task")
        with anyio.CancelScope():  # bound to the task that carries the rest
            await asyncio.sleep(0)
        seen.append(asyncio.current_task())
        seen.append(var.get())
        done.set()

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        ctx.start_eager(body)
        assert var.get() == "caller"
        assert len(seen) == 1
        with anyio.fail_after(5):
            await done.wait()
        assert seen[0] is seen[1]
        assert seen[2] == "task"


async def test_starts_nested_in_a_first_step_each_get_a_task_of_their_own() -> None:
    tasks: dict[str, object] = {}
    finished: list[str] = []

    async def inner() -> None:
        tasks["inner"] = asyncio.current_task()
        with anyio.CancelScope():
            await asyncio.sleep(0)
        assert asyncio.current_task() is tasks["inner"]
        finished.append("inner")

    async def outer(ctx: Context) -> None:
        tasks["outer"] = asyncio.current_task()
        with anyio.CancelScope():
            ctx.start_eager(inner)
            assert asyncio.current_task() is tasks["outer"]
            await asyncio.sleep(0)
        assert asyncio.current_task() is tasks["outer"]
        finished.append("outer")

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        ctx.start_eager(outer, ctx)
        assert tasks["inner"] is not tasks["outer"]
        with anyio.fail_after(5):
            while len(finished) < 2:
                await asyncio.sleep(0)


async def test_a_suspended_eager_coroutine_is_owned_and_cancelled_by_the_context() -> None:
    started = anyio.Event()
    cleaned = anyio.Event()

    async def slow() -> None:
        started.set()
        try:
            await anyio.sleep(30)
        finally:
            cleaned.set()

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        ctx.start_eager(slow)
        assert started.is_set()
    assert cleaned.is_set()  # closing the context cancelled it


async def test_a_cancel_scope_of_the_eager_coroutine_cancelled_from_outside_stops_it() -> None:
    scopes: list[anyio.CancelScope] = []
    outcome: list[str] = []

    async def child() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await anyio.sleep(30)
        outcome.append("stopped" if scope.cancelled_caught else "ran out")

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        ctx.start_eager(child)
        (scope,) = scopes
        scope.cancel()
        with anyio.fail_after(5):
            while not outcome:
                await asyncio.sleep(0)
        assert outcome == ["stopped"]


async def test_an_eager_failure_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def boom() -> None:
        raise ValueError("bad")

    async def later() -> None:
        await asyncio.sleep(0)
        raise ValueError("bad later")

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        ctx.start_eager(boom)
        ctx.start_eager(later)
        with anyio.fail_after(5):
            while (
                sum("bad" in r.getMessage() or "bad" in str(r.exc_info) for r in caplog.records) < 2
            ):
                await asyncio.sleep(0)


async def test_waiting_for_an_eager_coroutine_and_giving_up_does_not_cancel_it() -> None:
    go = anyio.Event()
    finished = anyio.Event()

    async def child() -> None:
        await go.wait()
        finished.set()

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        ctx.start_eager(child)
        with anyio.move_on_after(0.01):
            await finished.wait()
        go.set()
        with anyio.fail_after(5):
            await finished.wait()


async def test_deferred_callbacks_run_at_the_next_iteration_unless_undeferred() -> None:
    calls: list[str] = []
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        ctx.defer("a", lambda: calls.append("a"))
        ctx.defer("b", lambda: calls.append("b"))
        ctx.undefer("b")
        assert calls == []
        await asyncio.sleep(0)
        assert calls == ["a"]


async def test_a_turn_started_soon_runs_at_the_next_iteration_or_when_asked() -> None:
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        later = ctx.agents.create(persist=False)
        later.start("hi", soon=True)
        assert later.running
        assert later.turns == 0  # not begun: its caller may watch it first
        with anyio.fail_after(5):
            await later.when_idle()
        assert later.turns == 1
        now = ctx.agents.create(persist=False)
        now.start("hi", soon=True)
        now.start_driver()  # at once (a scripted turn never waits: it has ended)
        assert now.turns == 1
        assert not now.running


async def test_carried_coroutines_that_end_by_cancellation_or_failure_leave_no_cycle() -> None:
    scopes: list[anyio.CancelScope] = []

    async def cancelled() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await anyio.sleep(30)
        raise asyncio.CancelledError  # ends its task cancelled

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("bad")

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(3):
                ctx.start_eager(cancelled)
                scopes.pop().cancel()
                ctx.start_eager(fails)
            for _ in range(5):
                await asyncio.sleep(0)
            gc.collect()
            carriers = [o for o in gc.garbage if type(o).__name__ == "_Carrier"]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert carriers == []


async def test_without_asyncio_s_task_hooks_start_eager_falls_back_to_an_eager_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Python whose asyncio lacks the private ``_enter_task``/``_leave_task`` still
    starts (a task per start, eager where the Python can) and keeps the guarantee."""
    from dsh.core import _container

    monkeypatch.setattr(_container, "_EAGER_STARTER", False)
    ran: list[str] = []
    go = anyio.Event()

    async def quick() -> None:
        ran.append("quick")

    async def waits() -> None:
        await go.wait()
        ran.append("waits")

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        ctx.start_eager(quick)
        ctx.start_eager(waits)
        if EAGER:
            assert ran == ["quick"]
        go.set()
        with anyio.fail_after(5):
            while len(ran) < 2:
                await anyio.sleep(0.001)
    assert sorted(ran) == ["quick", "waits"]
