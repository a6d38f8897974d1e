"""``Context.spawn(eager=True)``: the task's first step runs at once, so a coroutine that
never suspends has finished on return (an in-process child whose turn never waits costs
no loop iteration). On 3.12+ that is ``eager_start``; on 3.11 ``dsh.core._eager`` runs the
step as the task, whose own first step then only hands over the outcome."""

from __future__ import annotations

import asyncio
import contextvars
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
        assert steps == ["ran"]  # (on 3.11 the task is done at its first step)
        assert task.done() is EAGER
        assert await task == "done"


async def test_the_eager_step_runs_as_the_task_in_its_own_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="caller")
    seen: list[object] = []

    async def body() -> str:
        seen.append(asyncio.current_task())
        var.set("task")
        with anyio.CancelScope():  # bound to the task that carries the rest
            await asyncio.sleep(0)
        seen.append(asyncio.current_task())
        return var.get()

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        me = asyncio.current_task()
        task = ctx.spawn(body, eager=True)
        assert asyncio.current_task() is me
        assert var.get() == "caller"
        assert seen == [task]
        assert await asyncio.wait_for(task, 5) == "task"
        assert seen == [task, task]


async def test_an_eager_task_cancelled_before_its_next_step_gets_the_cancellation() -> None:
    cleaned = anyio.Event()

    async def waits() -> None:
        try:
            await anyio.sleep(30)
        finally:
            cleaned.set()

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        task = ctx.spawn(waits, eager=True)
        task.cancel()  # before the loop ran the task at all
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert cleaned.is_set()


async def test_an_eager_child_scope_cancelled_from_outside_stops_only_the_child() -> None:
    scopes: list[anyio.CancelScope] = []

    async def child() -> str:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await anyio.sleep(30)
        return "stopped" if scope.cancelled_caught else "ran out"

    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        task = ctx.spawn(child, eager=True)
        (scope,) = scopes
        scope.cancel()
        assert await asyncio.wait_for(task, 5) == "stopped"


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
