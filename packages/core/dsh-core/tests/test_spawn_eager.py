"""``Context.spawn(eager=True)``: on Python 3.12+ the task's first step runs at once, so a
coroutine that never suspends is done on return (an in-process child whose turn never
waits costs no loop iteration); on 3.11 it is an ordinary context task."""

from __future__ import annotations

import asyncio
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
