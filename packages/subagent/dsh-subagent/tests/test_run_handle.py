"""RunHandle's observer port: what the runtime sees of a run, and nothing more."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from dsh.subagent import RunHandle, SubagentProgress, SubagentResult
from dsh.subagent._run import handle_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]


class Observer:
    def __init__(self) -> None:
        self.seen: list[object] = []

    def settled(self, result: SubagentResult | None, error: BaseException | None) -> None:
        self.seen.append(("settled", result.stop_reason if result else type(error).__name__))

    def disposed(self) -> None:
        self.seen.append("disposed")

    def progress_wanted(self) -> None:
        self.seen.append("progress wanted")


def test_the_port_reads_a_run_without_private_fields() -> None:
    handle = RunHandle("r1", provider="p", label="review")
    assert (handle.id, handle.provider, handle.label) == ("r1", "p", "review")
    assert handle_of(handle.run) is handle
    assert not handle.has_sink
    assert not handle.wants_progress
    handle.set_sink(lambda h, item: None)
    assert handle.has_sink
    assert handle.wants_progress
    handle.settle(SubagentResult("ok", "completed"))
    assert not handle.has_sink  # progress ends at settlement


async def test_an_observer_attached_late_hears_what_already_happened() -> None:
    settled = RunHandle("r2", provider="p", dispose_now=lambda: True)
    settled.settle(SubagentResult("ok", "completed"))
    late = Observer()
    settled.attach(late)
    assert late.seen == [("settled", "completed")]
    await settled.run.dispose()
    assert late.seen == [("settled", "completed"), "disposed"]

    gone = RunHandle("r3", provider="p", dispose_now=lambda: True)
    await gone.run.dispose()  # settles aborted when disposed unsettled
    after = Observer()
    gone.attach(after)
    assert after.seen == [("settled", "aborted"), "disposed"]


async def test_the_observer_hears_once_when_progress_is_first_wanted() -> None:
    handle = RunHandle("r4", provider="p")
    observer = Observer()
    handle.attach(observer)
    handle.want_progress()
    handle.want_progress()
    assert observer.seen == ["progress wanted"]
    stream = handle.run.progress()
    handle.emit(SubagentProgress("text", text="hi"))
    handle.settle(SubagentResult("ok", "completed"))
    assert [item.text async for item in stream] == ["hi"]


async def test_waiters_wait_on_futures_of_their_own() -> None:
    handle = RunHandle("r5", provider="p")
    run = handle.run
    with anyio.move_on_after(0.05):
        await run.result  # gives up: cancels only its own future
    other = asyncio.ensure_future(_result_of(run))
    await asyncio.sleep(0.01)
    handle.settle(SubagentResult("done", "completed"))
    with anyio.fail_after(5):
        assert await other == "done"


async def _result_of(run: object) -> str:
    result: SubagentResult = await run.result  # type: ignore[attr-defined]
    return result.output
