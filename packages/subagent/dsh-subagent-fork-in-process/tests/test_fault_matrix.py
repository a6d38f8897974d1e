"""The ``fork`` provider through the fault matrix (:mod:`dsh.testing.faults`).

The parent finishes a turn first, so every child is seeded with it. The child runs
on the fault model (``hang``, ``crash``, ``stubborn``, ``approval`` prompts: the
approval cell's tool needs approval, and nobody can answer); the garbage and HTTP 500
cells give it the ``openai`` adapter (dsh-llm-openai) pointed at a fake
chat-completions server; the parent-SIGKILL cell's parent registers a tool that runs
``sleep 300`` through dsh.subprocess (``fault_matrix_tool.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dsh.core import Context, parse_preset
from dsh.testing.faults import (
    Fault,
    FaultHarness,
    FaultMatrix,
    ParentProcess,
    fault_chat_server,
    fault_model,
    guarded_tool,
    in_process_case,
)

pytestmark = pytest.mark.timeout(60)

PLUGIN = "dsh-subagent-fork-in-process"
TOOL = f"{Path(__file__).with_name('fault_matrix_tool.py')}:install"
NEEDS = {
    Fault.GARBAGE_OUTPUT: "dsh.llm_openai",
    Fault.HTTP_500: "dsh.llm_openai",
    Fault.PARENT_SIGKILL: "dsh.subprocess",
}
"""What a cell imports beyond the provider's own dependencies (its dev group)."""


class TestForkFaults(FaultMatrix):
    @pytest.fixture
    async def fault_harness(self, fault: Fault, tmp_path: Path) -> AsyncIterator[FaultHarness]:
        if fault in NEEDS:
            pytest.importorskip(NEEDS[fault], reason=f"the {fault.value} cell needs it")
        rows = f'[[plugin]]\nname = "{PLUGIN}"\n'
        if NEEDS.get(fault) == "dsh.llm_openai":
            rows += '[[plugin]]\nname = "dsh-llm-openai"\n'
        calls: list[str] = []
        parent_process = ParentProcess(plugins=[(PLUGIN, {})], setup=TOOL, cwd=str(tmp_path))
        with fault_chat_server() as server:
            async with Context.open(parse_preset(rows), cwd=tmp_path) as ctx:
                ctx.tools.register(guarded_tool())  # needs approval: the approval cell
                parent = ctx.agents.create(model=fault_model(calls))
                await parent.run("a completed turn the child is seeded with")
                case = in_process_case(
                    fault, "fork", calls=calls, model_server=server, parent_process=parent_process
                )
                yield FaultHarness(ctx, parent, case)
