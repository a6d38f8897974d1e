"""The provider kit's RemoteRun lifecycle, with small runs (no wire protocol).

Where a process matters, the run's child is a real ``sleep`` process (started with
asyncio's subprocess support: the interface package's tests do not depend on
dsh-subprocess), and the dsh-testing plugin fails a test that leaves it running.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Agent, BusEvent, Context, parse_preset
from dsh.subagent import (
    NO_START_CAPABILITIES,
    InvalidRequest,
    StartAborted,
    StartFailed,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subagent.kit import RemoteRun, RemoteTimeouts, Stages
from dsh.testing.processes import alive

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

PRESET = parse_preset('[agent.model]\nadapter = "scripted"\n')

Hook = Callable[["Probe"], Awaitable[Any]]


async def hang(_run: Probe) -> Any:
    await anyio.sleep_forever()


async def answer(_run: Probe) -> SubagentResult:
    return SubagentResult("the answer", "completed")


class Probe(RemoteRun):
    """A run whose hooks are given as coroutines; it records what the kit called.

    With ``process=True`` its ``open`` starts a real ``sleep 30`` (own session) that
    ``close`` kills and reaps.
    """

    def __init__(
        self,
        request: SubagentStartRequest,
        *,
        timeouts: RemoteTimeouts | None = None,
        on_open: Hook | None = None,
        on_turn: Hook = answer,
        on_cancel: Hook | None = None,
        close_delay: float = 0.0,
        process: bool = False,
        last_words: str = "",
    ) -> None:
        super().__init__("probe", request, timeouts or RemoteTimeouts())
        self.on_open = on_open
        self.on_turn = on_turn
        self.on_cancel = on_cancel
        self.close_delay = close_delay
        self.process = process
        self.last_words = last_words
        self.proc: asyncio.subprocess.Process | None = None
        self.calls: list[str] = []
        self.close_started = 0
        self.close_finished = 0
        self.said = ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def open(self) -> None:
        self.calls.append("open")
        if self.process:
            self.stages.enter("spawn")
            self.proc = await asyncio.create_subprocess_exec("sleep", "30", start_new_session=True)
        self.stages.enter("handshake")
        if self.on_open is not None:
            await self.on_open(self)

    async def turn(self) -> SubagentResult:
        self.calls.append("turn")
        result: SubagentResult = await self.on_turn(self)
        return result

    async def cancel(self) -> bool:
        self.calls.append("cancel")
        if self.on_cancel is None:
            return False
        sent: bool = await self.on_cancel(self)
        return sent

    async def close(self) -> None:
        self.calls.append("close")
        self.close_started += 1
        await anyio.sleep(self.close_delay)
        if self.proc is not None:
            if self.proc.returncode is None:
                self.proc.kill()
            await self.proc.wait()
        self.said = self.last_words
        self.close_finished += 1

    def kill_now(self) -> None:
        self.calls.append("kill_now")
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()

    def partial_output(self) -> str:
        return "partial"

    def details(self) -> str:
        return f"probe stderr (last lines):\n{self.said}" if self.said else ""


class ProbeProvider:
    """A provider whose start() launches a Probe (built by ``make``)."""

    capabilities = NO_START_CAPABILITIES
    inherits_parent_context = False

    def __init__(self, make: Callable[[SubagentStartRequest], Probe]) -> None:
        self.name = "probe"
        self.make = make
        self.runs: list[Probe] = []

    async def start(self, request: SubagentStartRequest) -> SubagentRun:
        run = self.make(request)
        self.runs.append(run)
        return await run.launch()


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(PRESET) as ctx:
        yield ctx


@pytest.fixture
def parent(ctx: Context) -> Agent:
    return ctx.agents.create(label="parent")


def request(parent: Agent, signal: AbortSignal | None = None) -> SubagentStartRequest:
    return SubagentStartRequest("do it", parent, signal or AbortSignal())


def record(ctx: Context) -> list[BusEvent]:
    seen: list[BusEvent] = []
    for kind in ("subagent/start", "subagent/end"):
        ctx.events.on(kind, seen.append)
    return seen


def timeouts(**fields: Any) -> RemoteTimeouts:
    return RemoteTimeouts(**fields)


async def settled_within(run: SubagentRun, seconds: float) -> tuple[SubagentResult, float]:
    started = time.monotonic()
    with anyio.fail_after(seconds):
        result = await run.result
    return result, time.monotonic() - started


def callbacks_on(signal: AbortSignal) -> int:
    """How many callbacks ``signal`` holds (a run that ended must not stay linked)."""
    return len(signal._callbacks or [])


# -- before publication -----------------------------------------------------------------


async def test_abort_before_start_raises_and_does_nothing(ctx: Context, parent: Agent) -> None:
    seen = record(ctx)
    signal = AbortSignal()
    signal.abort("user pressed stop")
    probe = Probe(request(parent, signal), process=True)
    with pytest.raises(StartAborted, match="subagent start aborted: user pressed stop"):
        await probe.launch()
    assert probe.calls == []
    assert seen == []
    assert callbacks_on(signal) == 0


async def test_abort_during_a_slow_open_raises_and_closes(ctx: Context, parent: Agent) -> None:
    seen = record(ctx)
    signal = AbortSignal()
    probe = Probe(request(parent, signal), process=True, on_open=hang)
    asyncio.get_running_loop().call_later(0.2, signal.abort, "parent cancelled")
    started = time.monotonic()
    with pytest.raises(StartAborted, match="parent cancelled") as info:
        await probe.launch()
    assert info.value.code == "ABORTED"
    assert time.monotonic() - started < 1.5
    assert probe.calls == ["open", "close"]
    assert probe.close_finished == 1
    assert not alive(probe.pid)
    assert seen == []
    assert callbacks_on(signal) == 0


async def test_start_timeout_fails_naming_the_stage_with_details(parent: Agent) -> None:
    probe = Probe(
        request(parent),
        timeouts=timeouts(start_timeout=0.2),
        process=True,
        on_open=hang,
        last_words="listening on stdio...",
    )
    with pytest.raises(StartFailed) as info:
        await probe.launch()
    assert str(info.value) == (
        "probe did not start within start_timeout = 0.2 s (stage: handshake)\n"
        "probe stderr (last lines):\nlistening on stdio..."
    )
    assert probe.close_finished == 1
    assert not alive(probe.pid)


async def test_start_timeout_is_reported_even_when_open_turns_the_cancel_into_an_error(
    parent: Agent,
) -> None:
    """A transport library may answer its cancellation with an error of its own; the
    timeout is still what happened."""

    async def converts(_run: Probe) -> None:
        try:
            await anyio.sleep_forever()
        except BaseException:
            raise ConnectionResetError("stream closed") from None

    probe = Probe(request(parent), timeouts=timeouts(start_timeout=0.2), on_open=converts)
    with pytest.raises(StartFailed, match=r"did not start within start_timeout = 0\.2 s"):
        await probe.launch()


async def test_open_errors(parent: Agent) -> None:
    refusal = InvalidRequest("probe provider cwd must be an absolute path, got 'x'")

    async def refuse(_run: Probe) -> None:
        raise refusal

    probe = Probe(request(parent), on_open=refuse, last_words="ignored")
    with pytest.raises(InvalidRequest) as info:
        await probe.launch()
    assert info.value is refusal  # unchanged: no stage, no details
    assert probe.close_finished == 1

    async def crash(_run: Probe) -> None:
        raise RuntimeError("bad handshake reply")

    probe = Probe(request(parent), on_open=crash, process=True, last_words="panic: boom")
    with pytest.raises(StartFailed) as failed:
        await probe.launch()
    assert str(failed.value) == (
        "probe handshake failed: RuntimeError: bad handshake reply\n"
        "probe stderr (last lines):\npanic: boom"
    )
    assert isinstance(failed.value.__cause__, RuntimeError)
    assert not alive(probe.pid)


async def test_a_caller_cancelled_during_open_leaves_nothing_running(parent: Agent) -> None:
    signal = AbortSignal()
    probe = Probe(request(parent, signal), process=True, on_open=hang)
    with anyio.move_on_after(0.2):
        await probe.launch()
    assert "kill_now" in probe.calls or probe.close_finished == 1
    with anyio.fail_after(2):
        while alive(probe.pid) or probe.close_finished == 0:
            await asyncio.sleep(0.01)
    assert callbacks_on(signal) == 0


async def test_a_cancelled_error_of_opens_own_is_a_start_failure(parent: Agent) -> None:
    """open() awaited a future somebody else cancelled: nobody cancelled the caller, so
    it gets a StartFailed, not a CancelledError it never asked for."""

    async def stray(_run: Probe) -> None:
        future = asyncio.get_running_loop().create_future()
        future.cancel()
        await future

    probe = Probe(request(parent), on_open=stray, process=True)
    with pytest.raises(StartFailed, match=r"^probe handshake failed: CancelledError$"):
        await probe.launch()
    assert probe.close_finished == 1
    assert not alive(probe.pid)


async def test_publishing_into_a_closed_context_closes_the_child() -> None:
    async with Context.open(PRESET) as ctx:
        parent = ctx.agents.create()
    probe = Probe(request(parent), process=True)
    with pytest.raises(RuntimeError, match="context is not open"):
        await probe.launch()
    assert probe.close_finished == 1
    assert not probe.published
    assert not alive(probe.pid)


# -- the turn ---------------------------------------------------------------------------


async def test_a_completed_turn_settles_before_close_finishes(parent: Agent) -> None:
    probe = Probe(request(parent), process=True, close_delay=3.0)
    run = await probe.launch()
    result, _ = await settled_within(run, 2.5)
    assert result == SubagentResult("the answer", "completed")
    assert probe.close_finished == 0  # settled while the close had seconds to go
    with anyio.fail_after(2):
        while probe.close_started == 0:
            await anyio.sleep(0.005)
    assert probe.close_finished == 0
    await run.dispose()  # waits for the teardown
    assert probe.close_finished == 1
    assert not alive(probe.pid)


async def test_a_failed_turn_settles_error_with_details_read_after_close(parent: Agent) -> None:
    async def crash(_run: Probe) -> SubagentResult:
        raise ConnectionResetError("agent closed stdout")

    probe = Probe(request(parent), process=True, on_turn=crash, last_words="Traceback: boom")
    run = await probe.launch()
    async with run:
        result, _ = await settled_within(run, 2)
    assert result.stop_reason == "error"
    assert result.output == "partial"
    assert result.diagnostic == (
        "probe turn failed: agent closed stdout\nprobe stderr (last lines):\nTraceback: boom"
    )
    assert probe.close_finished == 1


async def test_kit_diagnostics_are_redacted(parent: Agent) -> None:
    async def leaks(_run: Probe) -> SubagentResult:
        raise PermissionError("401 for https://api.example/v1?api_key=abcdefghijklmnopqrstuv")

    run = await Probe(request(parent), on_turn=leaks).launch()
    async with run:
        result, _ = await settled_within(run, 2)
    assert (
        result.diagnostic == "probe turn failed: 401 for https://api.example/v1?api_key=[redacted]"
    )


async def test_a_turn_that_returns_garbage_or_cancels_itself_is_an_error(parent: Agent) -> None:
    async def garbage(_run: Probe) -> Any:
        return {"output": "not a result"}

    async def self_cancel(_run: Probe) -> SubagentResult:
        raise asyncio.CancelledError

    for hook, words in ((garbage, "dict"), (self_cancel, "cancelled")):
        run = await Probe(request(parent), on_turn=hook).launch()
        async with run:
            result, _ = await settled_within(run, 2)
        assert result.stop_reason == "error", hook
        assert words in (result.diagnostic or ""), result.diagnostic


async def test_turn_timeout_settles_error_naming_it(parent: Agent) -> None:
    probe = Probe(request(parent), timeouts=timeouts(turn_timeout=0.3), on_turn=hang, process=True)
    run = await probe.launch()
    async with run:
        result, took = await settled_within(run, 3)
    assert result.stop_reason == "error"
    assert result.diagnostic is not None
    assert "no answer within turn_timeout = 0.3 s" in result.diagnostic
    assert result.output == "partial"
    assert 0.3 <= took < 1.5
    assert probe.calls == ["open", "turn", "cancel", "close"]
    assert not alive(probe.pid)


async def test_a_cancel_that_could_not_be_sent_does_not_wait_the_grace(parent: Agent) -> None:
    signal = AbortSignal()
    probe = Probe(
        request(parent, signal), timeouts=timeouts(cancel_grace=5), on_turn=hang, process=True
    )
    run = await probe.launch()
    await asyncio.sleep(0.05)
    signal.abort("parent cancelled")
    result, took = await settled_within(run, 4)
    assert result.stop_reason == "aborted"
    assert result.diagnostic == (
        "parent cancelled (probe could not be asked to cancel; it was stopped)"
    )
    assert took < 1.0  # well under cancel_grace
    await run.dispose()
    assert not alive(probe.pid)


async def test_a_sent_cancel_waits_for_the_turn_up_to_the_grace(parent: Agent) -> None:
    confirmed = anyio.Event()

    async def stops_when_asked(_run: Probe) -> SubagentResult:
        await confirmed.wait()
        return SubagentResult("", "aborted")

    async def asks(_run: Probe) -> bool:
        asyncio.get_running_loop().call_later(0.3, confirmed.set)
        return True

    signal = AbortSignal()
    probe = Probe(
        request(parent, signal),
        timeouts=timeouts(cancel_grace=3),
        on_turn=stops_when_asked,
        on_cancel=asks,
    )
    run = await probe.launch()
    await asyncio.sleep(0.05)
    signal.abort("stop")
    result, took = await settled_within(run, 4)
    assert result.stop_reason == "aborted"
    assert result.diagnostic == "stop"
    assert 0.3 <= took < 1.0  # waited for the confirmation, not the whole grace
    await run.dispose()

    async def sent(_run: Probe) -> bool:
        return True

    signal = AbortSignal()
    run = await Probe(
        request(parent, signal), timeouts=timeouts(cancel_grace=0.4), on_turn=hang, on_cancel=sent
    ).launch()
    await asyncio.sleep(0.05)
    signal.abort("stop")
    result, took = await settled_within(run, 4)
    assert result.diagnostic == (
        "stop (probe did not confirm the cancel within 0.4 s and was stopped)"
    )
    assert 0.4 <= took < 1.4
    await run.dispose()


async def test_a_turn_that_ignores_its_cancellation_cannot_hang_dispose(parent: Agent) -> None:
    async def stubborn(_run: Probe) -> SubagentResult:
        try:
            await anyio.sleep_forever()
        except asyncio.CancelledError:
            await asyncio.sleep(30)  # swallows the first cancel, e.g. awaiting a reply
        raise AssertionError("unreachable")

    probe = Probe(request(parent), on_turn=stubborn, process=True)
    run = await probe.launch()
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with anyio.fail_after(5):
        await run.dispose()
    assert time.monotonic() - started < 3.0
    assert probe.close_finished == 1
    assert (await run.result).stop_reason == "aborted"
    assert not alive(probe.pid)


# -- dispose ----------------------------------------------------------------------------


async def test_concurrent_disposes_close_once(parent: Agent) -> None:
    probe = Probe(request(parent), on_turn=hang, process=True, close_delay=0.3)
    run = await probe.launch()
    await asyncio.sleep(0.05)
    await asyncio.gather(run.dispose(), run.dispose(), run.dispose())
    assert probe.close_started == probe.close_finished == 1
    assert run.disposed
    assert not alive(probe.pid)
    assert (await run.result).stop_reason == "aborted"
    await run.dispose()  # idempotent
    assert probe.close_started == 1


async def test_a_dispose_cancelled_twice_one_tick_apart_still_closes_once(parent: Agent) -> None:
    """Issue 10 item 3: the task awaiting dispose() is cancelled, then again one loop
    tick later; the teardown still runs once, to completion, and the run counts as
    disposed only then."""
    probe = Probe(request(parent), on_turn=hang, process=True, close_delay=0.3)
    run = await probe.launch()
    await asyncio.sleep(0.05)
    waiter = asyncio.get_running_loop().create_task(run.dispose())
    await asyncio.sleep(0.05)
    waiter.cancel()
    await asyncio.sleep(0)  # one tick
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not run.disposed
    with anyio.fail_after(3):
        await run.dispose()
    assert run.disposed
    assert probe.close_started == probe.close_finished == 1
    assert not alive(probe.pid)


async def test_a_driver_cancelled_twice_mid_close_still_has_dispose_wait_for_it(
    parent: Agent,
) -> None:
    """The task driving the run (a context task) is cancelled while it closes, and again
    one tick later: dispose() must still return only once close() has finished."""
    probe = Probe(request(parent), on_turn=hang, process=True, close_delay=0.4)
    run = await probe.launch()
    await asyncio.sleep(0.05)
    probe.stop.abort("stopping")
    while probe.close_started == 0:
        await asyncio.sleep(0.01)
    driver = probe._driver
    assert driver is not None
    driver.cancel()
    await asyncio.sleep(0)
    driver.cancel()
    with anyio.fail_after(3):
        await run.dispose()
    assert probe.close_finished == 1
    assert not alive(probe.pid)


async def test_a_driver_cancelled_before_it_ran_still_closes_and_settles(parent: Agent) -> None:
    probe = Probe(request(parent), on_turn=hang, process=True)
    run = await probe.launch()
    assert probe._driver is not None
    probe._driver.cancel()  # before its first step: its own cleanup never runs
    result, _ = await settled_within(run, 3)
    assert result.stop_reason == "aborted"
    with anyio.fail_after(3):
        while probe.close_finished == 0:
            await asyncio.sleep(0.01)
    assert not alive(probe.pid)
    await run.dispose()
    assert probe.close_started == 1


async def test_closing_the_context_disposes_live_runs() -> None:
    async with Context.open(PRESET) as ctx:
        seen = record(ctx)
        parent = ctx.agents.create()
        req = request(parent)
        observed = Probe(req, on_turn=hang, process=True)
        run = await observed.launch()
        SubagentRuntime.of(ctx).observe(run, req)
        unobserved = Probe(request(parent), on_turn=hang, process=True)
        await unobserved.launch()
        await asyncio.sleep(0.05)
    for probe in (observed, unobserved):
        assert probe.close_started == probe.close_finished == 1
        assert not alive(probe.pid)
    assert run.disposed
    assert (await run.result).stop_reason == "aborted"
    assert [e.type for e in seen] == ["subagent/start", "subagent/end"]
    assert seen[1].data["stop_reason"] == "aborted"


# -- events -----------------------------------------------------------------------------


async def test_one_start_and_one_end_per_run_through_the_runtime(
    ctx: Context, parent: Agent
) -> None:
    seen = record(ctx)
    behaviours: list[dict[str, Any]] = []

    async def crash(_run: Probe) -> SubagentResult:
        raise RuntimeError("boom")

    async def refuse(_run: Probe) -> None:
        raise StartFailed("no such agent")

    provider = ProbeProvider(lambda req: Probe(req, process=True, **behaviours.pop(0)))
    runtime = SubagentRuntime.of(ctx)
    runtime.register_provider(provider)
    behaviours += [{}, {"on_turn": crash}, {"on_turn": hang}, {"on_open": refuse}]

    completed = await runtime.start("probe", request(parent))
    assert (await completed.result).ok
    await completed.dispose()
    failed = await runtime.start("probe", request(parent))
    assert (await failed.result).stop_reason == "error"
    await failed.dispose()
    signal = AbortSignal()
    aborted = await runtime.start("probe", request(parent, signal))
    signal.abort("stop")
    signal.abort("stop again")
    await aborted.dispose()
    await aborted.dispose()
    with pytest.raises(StartFailed, match="no such agent"):
        await runtime.start("probe", request(parent))

    assert [(e.type, e.data.get("stop_reason")) for e in seen] == [
        ("subagent/start", None),
        ("subagent/end", "completed"),
        ("subagent/start", None),
        ("subagent/end", "error"),
        ("subagent/start", None),
        ("subagent/end", "aborted"),
    ]
    assert len({e.data["run_id"] for e in seen}) == 3
    for probe in provider.runs:
        assert probe.close_started == probe.close_finished == 1
        assert not alive(probe.pid)


async def test_a_finished_run_does_not_stay_linked_to_the_request_signal(
    parent: Agent,
) -> None:
    signal = AbortSignal()
    for _ in range(3):
        run = await Probe(request(parent, signal)).launch()
        async with run:
            await run.result
    assert callbacks_on(signal) == 0
    gc.collect()


def test_stages_describe() -> None:
    stages = Stages("codex", "initialize")
    assert stages.describe(ConnectionResetError("peer went away")) == (
        "codex initialize failed: peer went away"
    )
    stages.enter("turn")
    assert stages.describe(ValueError("bad")) == "codex turn failed: ValueError: bad"
    assert stages.describe(TimeoutError()) == "codex turn failed: TimeoutError"
    assert stages.describe(InvalidRequest("no cwd")) == "codex turn failed: no cwd"
