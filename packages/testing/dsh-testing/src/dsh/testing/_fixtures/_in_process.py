"""Harnesses for in-process providers (``spawn``, ``fork``): the conformance suite and
the fault matrix, with the provider loaded from its plugin row, and the
parent-SIGKILL cell's ``fault_sleep`` tool."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Protocol

import pytest
from pydantic import BaseModel

from dsh.core import Agent, Context, Tool, ToolContext, parse_preset
from dsh.testing.conformance import ConformanceHarness
from dsh.testing.faults import (
    Fault,
    FaultHarness,
    ParentProcess,
    fault_chat_server,
    fault_model,
    guarded_tool,
    in_process_case,
)
from dsh.testing.scripting import prompt_behaviour_model

from ._presets import SCRIPTED_PRESET, plugin_rows

__all__ = [
    "SleepProcess",
    "fault_sleep_installer",
    "in_process_conformance",
    "in_process_faults",
    "prompt_behaviour_conformance",
]


class SleepProcess(Protocol):
    """What ``fault_sleep`` needs of the process it starts (a
    :class:`dsh.subprocess.ChildProcess`)."""

    async def wait(self) -> int:
        """Wait for the process to exit; its status."""
        ...

    async def terminate(self, *, eof_grace: float = ..., term_grace: float = ...) -> object:
        """Tear the process down."""
        ...


class _NoArgs(BaseModel):
    pass


def fault_sleep_installer(
    start: Callable[[Sequence[str]], Awaitable[SleepProcess]],
) -> Callable[[Context], None]:
    """The ``setup`` function (``install(ctx)``) of the parent-SIGKILL cell's parent:
    it registers ``fault_sleep``, a tool that runs ``sleep 300`` through ``start``
    (the provider's tests pass dsh.subprocess's ``ChildProcess.start`` with the run's
    tag, so the process is tagged and watched as every tool's process must be);
    cancelling the call tears the process down."""

    async def sleep(args: _NoArgs, tctx: ToolContext) -> str:
        child = await start(["sleep", "300"])
        try:
            return f"sleep exited with status {await child.wait()}"
        finally:
            await child.terminate(eof_grace=0, term_grace=0.5)

    def install(ctx: Context) -> None:
        ctx.tools.register(Tool.from_model("fault_sleep", "Sleep for 300 s", _NoArgs, sleep))

    return install


IN_PROCESS_NEEDS = {
    Fault.GARBAGE_OUTPUT: "dsh.llm_openai",
    Fault.HTTP_500: "dsh.llm_openai",
    Fault.PARENT_SIGKILL: "dsh.subprocess",
}
"""What a cell imports beyond an in-process provider's own dependencies (its dev group)."""


@asynccontextmanager
async def in_process_faults(
    fault: Fault,
    provider: str,
    plugin: str,
    cwd: Path,
    *,
    setup: str,
    seed_turn: str | None = None,
) -> AsyncIterator[FaultHarness]:
    """The fault matrix's harness for the in-process ``provider`` of ``plugin``.

    The child runs on the fault model (``hang``, ``crash``, ``stubborn``, ``approval``
    prompts; the approval cell's tool needs approval and nobody can answer); the garbage
    and HTTP 500 cells give it the ``openai`` adapter (dsh-llm-openai) pointed at a fake
    chat-completions server; the parent-SIGKILL cell's parent runs ``setup``
    (``"file.py:install"``, see :func:`fault_sleep_installer`). With ``seed_turn`` the
    parent finishes that turn first. A cell whose extra module is missing skips."""
    need = IN_PROCESS_NEEDS.get(fault)
    if need is not None:
        pytest.importorskip(need, reason=f"the {fault.value} cell needs it")
    rows = plugin_rows(plugin)
    if need == "dsh.llm_openai":
        rows += plugin_rows("dsh-llm-openai")
    calls: list[str] = []
    parent_process = ParentProcess(plugins=[(plugin, {})], setup=setup, cwd=str(cwd))
    with fault_chat_server() as server:
        async with Context.open(parse_preset(rows), cwd=cwd) as ctx:
            ctx.tools.register(guarded_tool())  # needs approval: the approval cell
            parent = ctx.agents.create(model=fault_model(calls))
            if seed_turn is not None:
                await parent.run(seed_turn)
            case = in_process_case(
                fault, provider, calls=calls, model_server=server, parent_process=parent_process
            )
            yield FaultHarness(ctx, parent, case)


@asynccontextmanager
async def in_process_conformance(provider: str, plugin: str) -> AsyncIterator[ConformanceHarness]:
    """The conformance suite's harness for the in-process ``provider`` of ``plugin``: the
    parent has finished a turn; the child says ``child says: <prompt>``, "hang" hangs,
    "fail" fails; a cancel settles within 1 s."""
    async with Context.open(parse_preset(SCRIPTED_PRESET + plugin_rows(plugin))) as ctx:
        parent = ctx.agents.create(model=prompt_behaviour_model(reply="child says: {prompt}"))
        await parent.run("a completed turn before delegating")
        yield prompt_behaviour_conformance(ctx, provider, parent)


def prompt_behaviour_conformance(ctx: Context, provider: str, parent: Agent) -> ConformanceHarness:
    """The conformance harness of an in-process ``provider`` whose children run on
    ``prompt_behaviour_model(reply="child says: {prompt}")`` (the parent's model, which
    they inherit): "summarise" completes, "hang" hangs, "fail" fails; a cancel settles
    within 1 s."""
    return ConformanceHarness(
        ctx,
        provider,
        parent,
        complete_prompt="summarise",
        expected_output="child says: summarise",
        hang_prompt="hang",
        fail_prompt="fail",
        cancel_bound=1.0,
    )
