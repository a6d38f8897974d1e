"""The fault matrix: every provider × every fault keeps the same four promises.

Subclass :class:`FaultMatrix` in your provider's tests and give it a
``fault_harness`` fixture that, for the ``fault`` it is handed, opens a context
with your provider registered and says how to induce that fault and what must
come of it (a :class:`FaultCase`)::

    class TestMyProviderFaults(FaultMatrix):
        not_applicable = {Fault.APPROVAL_REQUEST: "my child never asks: it has no tools"}

        @pytest.fixture
        async def fault_harness(self, fault: Fault) -> AsyncIterator[FaultHarness]:
            async with Context.open(preset) as ctx:
                yield FaultHarness(ctx, ctx.agents.create(), CASES[fault])

For every applicable cell the suite asserts:

* the run settles with the right stop reason (:data:`START_ABORTED`: the start
  raises :class:`~dsh.subagent.StartAborted`), with the expected diagnostic or
  output where the case names one;
* within a bound (:attr:`FaultCase.settle_bound`, counted from the fault);
* exactly one ``subagent/start`` and one ``subagent/end`` per started run (none
  for a start that raised), the end carrying the same stop reason;
* no process of the run's tree is alive :data:`PROCESS_GRACE` seconds after the
  run settled (after the SIGKILL, for :attr:`Fault.PARENT_SIGKILL`): the test
  runner is a child subreaper (the dsh-testing pytest plugin), so orphaned
  grandchildren are re-parented to it and counted too.

A fault that truly cannot happen for a provider is declared in the class's
:attr:`FaultMatrix.not_applicable` with a reason. Such a cell is no skip (under
``CI=true`` skips fail): it is a passing ``test_not_applicable[<fault>]`` that
checks the reason is stated and records it (``record_property``).

The parent-SIGKILL cell runs a separate parent process (``python -m
dsh.testing.faults parent SPEC.json``, see :class:`ParentProcess`) that opens a
context, starts the delegation whose tool runs a long process, and prints
``published``; the test waits until that long process runs, SIGKILLs the parent,
and asserts that every process of the tree is gone within :data:`PROCESS_GRACE`.

With the environment variable ``DSH_FAULT_MATRIX_REPORT`` set to a file name, every
cell appends one JSON line (provider, fault, outcome, seconds) to that file.
"""

from __future__ import annotations

from dsh.testing.faults._cases import (
    GARBAGE_BODY,
    PROCESS_GRACE,
    START_ABORTED,
    TREE_GONE,
    Cell,
    CellStep,
    Fault,
    FaultCase,
    FaultHarness,
    ParentProcess,
    fault_chat_server,
    fault_model,
    freeze_child,
    guarded_tool,
    in_process_case,
    kill_child,
    one_tick,
    until,
    until_child_process,
    until_progress,
    until_requested,
)
from dsh.testing.faults._matrix import FaultMatrix

__all__ = [
    "GARBAGE_BODY",
    "PROCESS_GRACE",
    "START_ABORTED",
    "TREE_GONE",
    "Cell",
    "CellStep",
    "Fault",
    "FaultCase",
    "FaultHarness",
    "FaultMatrix",
    "ParentProcess",
    "fault_chat_server",
    "fault_model",
    "freeze_child",
    "guarded_tool",
    "in_process_case",
    "kill_child",
    "one_tick",
    "until",
    "until_child_process",
    "until_progress",
    "until_requested",
]
