"""The kit's cancel contract: after the stop signal, an ``aborted`` result that
``turn()`` returns within ``cancel_grace`` is the run's (its blanks filled from the
stop's reason, ``partial_output()`` and ``usage()``); any other outcome settles
``aborted`` with the kit's own result. Small runs, no wire protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from dsh.core import AbortSignal, Agent, Context, parse_preset
from dsh.subagent import SubagentResult, SubagentStartRequest, SubagentUsage
from dsh.subagent.kit import RemoteRun, RemoteTimeouts

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PRESET = parse_preset('[agent.model]\nadapter = "scripted"\n')
PARTIAL_USAGE = SubagentUsage(input_tokens=7, output_tokens=3, incomplete=True)


class Confirming(RemoteRun):
    """Its turn works until asked to cancel, then returns ``answer`` (or raises it)."""

    def __init__(self, request: SubagentStartRequest, answer: SubagentResult | Exception) -> None:
        super().__init__("probe", request, RemoteTimeouts(cancel_grace=10))
        self.answer = answer
        self.asked = anyio.Event()
        self.working = anyio.Event()

    async def open(self) -> None:
        pass

    async def turn(self) -> SubagentResult:
        self.working.set()
        await self.asked.wait()
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    async def cancel(self) -> bool:
        self.asked.set()  # the child confirms at once
        return True

    async def close(self) -> None:
        pass

    def partial_output(self) -> str:
        return "said so far"

    def usage(self) -> SubagentUsage:
        return PARTIAL_USAGE


@pytest.fixture
async def parent() -> AsyncIterator[Agent]:
    async with Context.open(PRESET) as ctx:
        yield ctx.agents.create()


async def cancelled(parent: Agent, answer: SubagentResult | Exception) -> SubagentResult:
    signal = AbortSignal()
    probe = Confirming(SubagentStartRequest("work", parent, signal), answer)
    run = await probe.launch()
    async with run:
        with anyio.fail_after(5):  # well under cancel_grace: the turn confirms at once
            await probe.working.wait()
            signal.abort("the parent changed its mind")
            return await run.result


async def test_the_turns_own_aborted_result_is_the_runs(parent: Agent) -> None:
    own = SubagentResult(
        "the child's last words",
        "aborted",
        diagnostic="stopped at the parent's request after step 2",
        usage=SubagentUsage(input_tokens=40, output_tokens=9),
    )
    assert await cancelled(parent, own) == own
    # its blanks filled: the stop's reason, partial_output(), usage()
    assert await cancelled(parent, SubagentResult("", "aborted")) == SubagentResult(
        "said so far", "aborted", diagnostic="the parent changed its mind", usage=PARTIAL_USAGE
    )
    # any other outcome after the stop: the kit's aborted result
    kits = SubagentResult.aborted(
        "the parent changed its mind", output="said so far", usage=PARTIAL_USAGE
    )
    interrupted = SubagentResult.failed("the product ended the turn as 'interrupted'")
    for answer in (interrupted, SubagentResult("done anyway", "completed"), EOFError("gone")):
        assert await cancelled(parent, answer) == kits, answer
