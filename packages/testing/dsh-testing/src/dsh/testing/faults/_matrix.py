"""The fault matrix suite: :class:`FaultMatrix`."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from dsh.core import (
    AbortSignal,
    BusEvent,
    Context,
)
from dsh.subagent import (
    StartAborted,
    SubagentResult,
    SubagentRun,
)
from dsh.testing._processes import alive, cmdline, describe, live_children, process_tree
from dsh.testing._processes import reap_zombies as _reap_zombies
from dsh.testing.faults._cases import (
    DISPOSE_BOUND,
    EVENT_END,
    EVENT_START,
    PROCESS_GRACE,
    RUNNING_BOUND,
    START_ABORTED,
    TREE_GONE,
    Cell,
    Fault,
    FaultCase,
    FaultHarness,
    ParentProcess,
)

CELL_TIMEOUT = 3 * RUNNING_BOUND
"""pytest-timeout of one cell: above its generous waits (a parent that publishes, a
child at work), so those, not a module's shorter timeout, bound a cell under load."""

# -- the suite ---------------------------------------------------------------------------


class _Recorder:
    """``subagent/start`` and ``subagent/end`` events of one context."""

    def __init__(self, ctx: Context) -> None:
        self.events: list[BusEvent] = []
        self._offs = [
            ctx.events.on(EVENT_START, self.events.append),
            ctx.events.on(EVENT_END, self.events.append),
        ]

    def close(self) -> None:
        for off in self._offs:
            off()

    def of(self, run_id: str) -> list[BusEvent]:
        return [e for e in self.events if e.data.get("run_id") == run_id]


def _cancels(fault: Fault, case: FaultCase) -> bool:
    """Does the suite fire the signal once the child is at work (and the fault induced)?"""
    if fault in (Fault.CANCEL_MID_TURN, Fault.IGNORES_CANCEL):
        return True
    return fault is Fault.CHILD_HANG and case.expect == "aborted"


def _report(request: pytest.FixtureRequest, fault: Fault, **facts: Any) -> None:
    suite = request.node.parent.name if request.node.parent is not None else ""
    line = {"suite": suite, "fault": fault.value, **facts}
    for key, value in line.items():
        request.node.user_properties.append((key, value))
    summary = ", ".join(f"{k}={v}" for k, v in facts.items() if k != "provider")
    print(f"fault matrix: {facts.get('provider', suite)} {fault.value}: {summary}")
    target = os.environ.get("DSH_FAULT_MATRIX_REPORT")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")


async def _processes_gone(cell: Cell, within: float) -> float:
    """Seconds until no process the cell started (or that was orphaned to this process)
    is alive; AssertionError after ``within``."""
    started = time.monotonic()
    while True:
        left = cell.new_processes()
        elapsed = time.monotonic() - started
        if not left:
            return elapsed
        if elapsed > within:
            tree = process_tree(left)
            raise AssertionError(
                f"processes alive {within:g} s after the fault settled:\n"
                + "\n".join(describe(pid) for pid in sorted(tree))
            )
        await anyio.sleep(0.01)


_PR_GET_CHILD_SUBREAPER = 37


def _subreaper() -> bool | None:
    """Is this process a child subreaper (None: unknown, not Linux)?"""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = ctypes.c_int(0)
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return value.value != 0


class FaultMatrix:
    """Base class of the fault matrix; subclass it and define a ``fault_harness`` fixture
    that takes the ``fault`` and yields a :class:`FaultHarness`."""

    not_applicable: ClassVar[Mapping[Fault, str]] = {}
    """Faults that cannot happen for this provider, each with the reason why."""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """``test_fault`` runs once per applicable fault, ``test_not_applicable`` once per
        fault declared not applicable (once, as ``none``, when every fault applies)."""
        declared = type(self).not_applicable
        name = metafunc.function.__name__
        if name == "test_fault":
            faults = [fault for fault in Fault if fault not in declared]
            # the cell's own bounds, not the module's timeout, decide (a loaded machine)
            params = [
                pytest.param(fault, marks=pytest.mark.timeout(CELL_TIMEOUT)) for fault in faults
            ]
            metafunc.parametrize("fault", params, ids=[fault.value for fault in faults])
        elif name == "test_not_applicable":
            cells: list[tuple[Fault | None, str]] = [
                (fault, declared[fault]) for fault in Fault if fault in declared
            ]
            ids = [f"{fault.value}-n/a" for fault, _ in cells if fault is not None]
            if not cells:
                cells, ids = [(None, "")], ["none"]
            metafunc.parametrize(("fault", "reason"), cells, ids=ids)

    @pytest.fixture
    def fault_harness(self, fault: Fault) -> FaultHarness:
        """Override in the subclass (usually an async generator fixture)."""
        raise NotImplementedError("define a `fault_harness` fixture in your FaultMatrix subclass")

    def test_not_applicable(
        self, fault: Fault | None, reason: str, request: pytest.FixtureRequest
    ) -> None:
        """A fault declared not applicable states why (and the reason is recorded)."""
        if fault is None:
            assert not type(self).not_applicable
            return
        assert isinstance(fault, Fault)
        assert isinstance(reason, str)
        assert len(reason.split()) >= 5, (
            f"{fault.value} is declared not applicable without a reason that says why: {reason!r}"
        )
        _report(request, fault, outcome="n/a", reason=reason)

    @pytest.mark.anyio
    async def test_fault(
        self, fault: Fault, fault_harness: FaultHarness, request: pytest.FixtureRequest
    ) -> None:
        """The cell: settle right, within the bound, one event pair, nothing left running."""
        case = fault_harness.case
        if fault is Fault.CANCEL_BEFORE_PUBLICATION:
            assert case.expect == START_ABORTED, "cancel before publication expects START_ABORTED"
        if fault is Fault.PARENT_SIGKILL:
            assert case.expect == TREE_GONE, "the parent-SIGKILL cell expects TREE_GONE"
        if _subreaper() is False:
            pytest.fail(
                "the fault matrix needs the test runner to be a child subreaper, or orphaned"
                " grandchildren escape its process checks: run pytest with"
                " -p dsh.testing.pytest_plugin"
            )
        _reap_zombies()
        cell = Cell(fault, fault_harness, frozenset(live_children()))
        recorder = _Recorder(fault_harness.ctx)
        try:
            if fault is Fault.CANCEL_BEFORE_PUBLICATION:
                facts = await self._before_publication(cell, recorder)
            elif fault is Fault.PARENT_SIGKILL:
                facts = await self._parent_sigkill(cell)
            else:
                facts = await self._published(cell, recorder)
        finally:
            recorder.close()
            cell.kill_leftovers()
        _report(request, fault, provider=case.provider, **facts)

    # -- cells ---------------------------------------------------------------------------

    async def _before_publication(self, cell: Cell, recorder: _Recorder) -> dict[str, Any]:
        harness, case = cell.harness, cell.harness.case
        runtime = harness.runtime
        provider = runtime.get_provider(case.provider)
        assert provider is not None, f"provider {case.provider!r} is not registered"
        # 1. the signal fired before start: the runtime raises, and so does the provider
        signal = AbortSignal()
        signal.abort("fault matrix: cancelled before publication")
        with pytest.raises(StartAborted, match="cancelled before publication"):
            await runtime.start(case.provider, harness.request(signal))
        with pytest.raises(StartAborted, match="cancelled before publication"):
            await provider.start(harness.request(signal))
        facts: dict[str, Any] = {"outcome": START_ABORTED}
        # 2. the signal fires while start runs (the child exists, the handshake is on)
        if case.abort_during_start is not None:
            signal = AbortSignal()
            outcome: list[SubagentRun | BaseException] = []

            async def starter() -> None:
                try:
                    outcome.append(await runtime.start(case.provider, harness.request(signal)))
                except Exception as exc:
                    outcome.append(exc)

            aborted_at = 0.0
            with anyio.fail_after(RUNNING_BOUND + case.settle_bound):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(starter)
                    await case.abort_during_start(cell)
                    signal.abort("fault matrix: cancelled during start")
                    aborted_at = time.monotonic()
            raised_after = time.monotonic() - aborted_at
            (first,) = outcome
            if isinstance(first, SubagentRun):
                await first.dispose()
                raise AssertionError(
                    "the start published a run although the signal fired before it returned"
                    " (abort_during_start fired too late for this provider?)"
                )
            assert isinstance(first, StartAborted), f"expected StartAborted, got {first!r}"
            assert "cancelled during start" in str(first), first
            assert raised_after <= case.settle_bound, (
                f"the aborted start took {raised_after:.2f} s > {case.settle_bound:g} s to raise"
            )
            facts["raised_s"] = round(raised_after, 3)
        assert recorder.events == [], f"a start that raised emitted {recorder.events}"
        facts["gone_s"] = round(await _processes_gone(cell, PROCESS_GRACE), 3)
        return facts

    async def _published(self, cell: Cell, recorder: _Recorder) -> dict[str, Any]:
        fault, harness, case = cell.fault, cell.harness, cell.harness.case
        signal = AbortSignal()
        started = time.monotonic()
        run = await harness.runtime.start(case.provider, harness.request(signal))
        cell.run = run
        facts: dict[str, Any] = {}
        try:
            if case.wait_until_running is not None:
                await case.wait_until_running(cell)
            fault_at = time.monotonic() if case.wait_until_running is not None else started
            if fault is Fault.DOUBLE_CANCEL:
                assert not run.settled, f"the run settled before the fault: {run.result.peek()!r}"
                await _dispose_cancelled_twice(run)
            else:
                if case.induce is not None:
                    assert not run.settled, (
                        f"the run settled before the fault: {run.result.peek()!r}"
                    )
                    await case.induce(cell)
                if _cancels(fault, case):
                    assert not run.settled, (
                        f"the run settled before the cancel: {run.result.peek()!r}"
                    )
                    signal.abort(f"fault matrix: {fault.value}")
            try:
                with anyio.fail_after(case.settle_bound):
                    result = await run.result
            except TimeoutError:
                raise AssertionError(
                    f"the run did not settle within {case.settle_bound:g} s of the fault"
                ) from None
            settled_s = time.monotonic() - fault_at
            _check_result(result, case)
            facts.update(outcome=result.stop_reason, settled_s=round(settled_s, 3))
            facts["diagnostic"] = (result.diagnostic or "").split("\n", 1)[0][:160]
            facts["gone_s"] = round(await _processes_gone(cell, PROCESS_GRACE), 3)
            with anyio.fail_after(DISPOSE_BOUND):
                await run.dispose()
                await run.dispose()  # idempotent
            assert run.disposed
        finally:
            if not run.disposed:
                with anyio.move_on_after(DISPOSE_BOUND, shield=True):
                    await run.dispose()
        events = recorder.of(run.id)
        assert [e.type for e in events] == [EVENT_START, EVENT_END], (
            f"expected one subagent/start and one subagent/end, got {[e.type for e in events]}"
        )
        assert events[1].data.get("stop_reason") == result.stop_reason, events[1].data
        assert events[1].scope == harness.parent.id
        return facts

    async def _parent_sigkill(self, cell: Cell) -> dict[str, Any]:
        harness, case = cell.harness, cell.harness.case
        spec = case.parent_process
        assert spec is not None, "the parent-sigkill case needs a ParentProcess"
        payload = {
            "preset": spec.preset,
            "plugins": [[name, dict(config)] for name, config in spec.plugins],
            "setup": spec.setup,
            "cwd": spec.cwd or harness.ctx.cwd,
            "provider": case.provider,
            "prompt": case.prompt,
            "agent_options": dict(case.agent_options) if case.agent_options else None,
        }
        with tempfile.TemporaryDirectory(prefix="dsh-fault-parent-") as folder:
            spec_file, stderr_file = _parent_files(Path(folder), payload)
            with _open_for_writing(stderr_file) as stderr:
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "dsh.testing.faults",
                    "parent",
                    str(spec_file),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=stderr,
                    env={**os.environ, **(spec.env or {})},
                )
            tree: set[int] = set()
            try:
                tree = await _until_tool_runs(process, spec, stderr_file)
                names = {pid: cmdline(pid)[:160] for pid in tree}
                process.kill()
                await process.wait()
                killed_at = time.monotonic()
                try:
                    gone = await _processes_gone(cell, PROCESS_GRACE)
                except AssertionError as exc:
                    listed = "\n".join(f"{pid}: {names[pid]}" for pid in sorted(tree))
                    raise AssertionError(
                        f"{exc}\nthe tree when the parent was killed:\n{listed}"
                    ) from None
                survivors = {pid for pid in tree if alive(pid)}
                assert not survivors, "survived the parent's SIGKILL:\n" + "\n".join(
                    describe(pid) for pid in sorted(survivors)
                )
                gone = max(gone, time.monotonic() - killed_at)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                for pid in tree:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                assert process.stdout is not None
                with anyio.move_on_after(2):
                    await process.stdout.read()
        return {"outcome": TREE_GONE, "tree": len(tree), "gone_s": round(gone, 3)}


def _check_result(result: SubagentResult, case: FaultCase) -> None:
    assert result.stop_reason == case.expect, (
        f"expected stop reason {case.expect!r}, got {result.stop_reason!r}"
        f" (diagnostic: {result.diagnostic!r}, output: {result.output[:300]!r})"
    )
    if result.stop_reason != "completed":
        assert result.diagnostic, "a run that did not complete must say why in its diagnostic"
    if result.diagnostic is not None:
        assert len(result.diagnostic.encode()) <= 4096
    if case.diagnostic is not None:
        assert case.diagnostic in (result.diagnostic or ""), (
            f"the diagnostic does not mention {case.diagnostic!r}: {result.diagnostic!r}"
        )
    if case.output is not None:
        assert case.output in result.output, (
            f"the output does not contain {case.output!r}: {result.output[:500]!r}"
        )


async def _dispose_cancelled_twice(run: SubagentRun) -> None:
    """``dispose()`` in a task; that task cancelled, and again one loop tick later."""
    waiter = asyncio.get_running_loop().create_task(run.dispose())
    await asyncio.sleep(0)  # dispose() has begun
    waiter.cancel()
    await asyncio.sleep(0)  # one loop tick later
    waiter.cancel()
    await asyncio.wait({waiter})


def _parent_files(folder: Path, payload: Mapping[str, Any]) -> tuple[Path, Path]:
    """The parent's spec file (written) and the file its stderr goes to."""
    spec_file = folder / "parent.json"
    spec_file.write_text(json.dumps(payload), encoding="utf-8")
    return spec_file, folder / "stderr.txt"


def _open_for_writing(path: Path) -> Any:
    return path.open("wb")


async def _until_tool_runs(
    process: asyncio.subprocess.Process, spec: ParentProcess, stderr_file: Path
) -> set[int]:
    """The parent's tree (without the parent) once it published and its tool's long
    process runs."""

    def failure(what: str) -> AssertionError:
        with contextlib.suppress(OSError):
            tail = stderr_file.read_text(errors="replace")[-3000:]
            return AssertionError(f"{what}; the parent's stderr:\n{tail}")
        return AssertionError(what)

    assert process.stdout is not None
    deadline = time.monotonic() + spec.ready_bound
    try:
        line = await asyncio.wait_for(process.stdout.readline(), spec.ready_bound)
    except TimeoutError:
        raise failure(f"the parent did not publish within {spec.ready_bound:g} s") from None
    if line != b"published\n":
        raise failure(f"the parent did not publish (it said {line!r})")
    while True:
        tree = process_tree({process.pid})
        if any(spec.marker in cmdline(pid) for pid in tree):
            return tree - {process.pid}
        if process.returncode is not None:
            raise failure("the parent exited before its tool process ran")
        if time.monotonic() > deadline:
            listed = "\n".join(describe(pid) for pid in sorted(tree))
            raise failure(f"no process matching {spec.marker!r} in the parent's tree:\n{listed}")
        await anyio.sleep(0.01)
