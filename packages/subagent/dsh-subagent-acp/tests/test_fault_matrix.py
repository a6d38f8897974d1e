"""The ``acp`` provider through the fault matrix (:mod:`dsh.testing.faults`), twice:
driving the mock ACP agent (each fault is one of its modes), and driving a real
``dsh acp`` child whose model (dsh-llm-openai) is a fake chat-completions server and
whose ``run_command`` tool (the dsh-testing example plugin) runs ``sleep 300``."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.faults import (
    START_ABORTED,
    TREE_GONE,
    Cell,
    CellStep,
    Fault,
    FaultCase,
    FaultHarness,
    FaultMatrix,
    ParentProcess,
    fault_chat_server,
    kill_child,
    until_child_process,
    until_progress,
    until_requested,
)
from dsh.testing.fixtures import FAST_GRACES
from dsh.testing.model_servers import OpenAIChatServer
from dsh.testing.processes import cmdline, process_tree

pytestmark = pytest.mark.timeout(60)

GRACES = FAST_GRACES
MOCK_AGENT = "dsh.testing.mock_acp_agent"
DSH_ACP = "dsh.cli acp"

CHILD_PRESET = """
[[plugin]]
name = "dsh-llm-openai"

[[plugin]]
name = "dsh-testing-example"
config = {{ command_tool = "run_command"{permission} }}

[agent.model]
adapter = "openai"
model = "fault-matrix"
options = {{ base_url = "{api_base}", api_key_env = "", read_timeout = 30.0 }}
"""


def freeze_agent(match: str) -> CellStep:
    """SIGSTOP the agent process itself (matching ``match``), not the bubblewrap around
    it: from then on it ignores the cancel request and stdin EOF."""

    async def step(cell: Cell) -> None:
        tree = process_tree(cell.new_processes())
        found = [
            pid
            for pid in tree
            if match in cmdline(pid) and not os.path.basename(_exe(pid)).startswith("bwrap")
        ]
        assert len(found) == 1, f"expected one agent process matching {match!r}: {found}"
        cell.touched.add(found[0])
        os.kill(found[0], signal.SIGSTOP)

    return step


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def mock_case(fault: Fault, rig: Any, tmp_path: Path) -> FaultCase:
    """The mock agent's mode for each fault."""
    name = f"acp-mock-{fault.value}"

    def provider(mode: str, *extra: str, **fields: Any) -> str:
        return str(rig.register(rig.mock(mode, *extra, name=name, **{**GRACES, **fields})))

    running = until_progress("text")  # the mock says "working on it" first
    if fault is Fault.CANCEL_BEFORE_PUBLICATION:
        return FaultCase(
            provider("slow-start", "--delay", "30"),
            START_ABORTED,
            # the mock sleeps before it answers initialize: abort during the handshake
            abort_during_start=until_child_process(MOCK_AGENT, then=0.2),
            settle_bound=3.0,
        )
    if fault in (Fault.CANCEL_MID_TURN, Fault.DOUBLE_CANCEL):
        return FaultCase(provider("hang"), "aborted", wait_until_running=running, settle_bound=3.0)
    if fault is Fault.CHILD_CRASH:
        return FaultCase(provider("crash"), "error", diagnostic="exit status 3")
    if fault is Fault.CHILD_HANG:
        return FaultCase(
            provider("hang", turn_timeout=1.0), "error", diagnostic="turn_timeout", settle_bound=5.0
        )
    if fault is Fault.IGNORES_CANCEL:
        return FaultCase(
            provider("ignore-cancel", "--ignore-eof"),
            "aborted",
            diagnostic="did not confirm the cancel",
            wait_until_running=running,
            settle_bound=3.0,
        )
    if fault is Fault.GARBAGE_OUTPUT:
        return FaultCase(provider("garbage"), "error", diagnostic="not JSON")
    if fault is Fault.HTTP_500:
        # the mock has no model: it answers session/prompt with a JSON-RPC error, as an
        # ACP agent whose model failed does (the dsh acp row drives a real HTTP 500)
        return FaultCase(provider("error"), "error", diagnostic="the mock agent fails this prompt")
    if fault is Fault.APPROVAL_REQUEST:
        return FaultCase(provider("permission"), "completed", output="permission: reject_once")
    assert fault is Fault.PARENT_SIGKILL
    args = ["-m", MOCK_AGENT, "--mode", "hang", "--escapee"]
    config = {"name": name, "command": sys.executable, "args": args, **GRACES}
    return FaultCase(
        name,
        TREE_GONE,
        parent_process=ParentProcess(
            plugins=[("dsh-subagent-acp", config)],
            marker="time.sleep(120)",  # the escapee, in a session of its own
            cwd=str(tmp_path),
        ),
    )


def dsh_case(fault: Fault, rig: Any, preset: Path, server: OpenAIChatServer) -> FaultCase:
    """A real ``dsh acp`` child; its model server answers by the prompt's words."""
    name = f"acp-dsh-{fault.value}"

    def provider(**fields: Any) -> str:
        return str(rig.register(rig.dsh(preset, name=name, **{**GRACES, **fields})))

    asked = until_requested(server, "please hang")
    if fault is Fault.CANCEL_BEFORE_PUBLICATION:
        return FaultCase(
            provider(),
            START_ABORTED,
            prompt="please hang",
            # dsh acp imports for about a second before it answers initialize
            abort_during_start=until_child_process(DSH_ACP, then=0.1),
            settle_bound=3.0,
        )
    if fault in (Fault.CANCEL_MID_TURN, Fault.DOUBLE_CANCEL):
        return FaultCase(
            provider(), "aborted", prompt="please hang", wait_until_running=asked, settle_bound=3.0
        )
    if fault is Fault.CHILD_CRASH:
        return FaultCase(
            provider(),
            "error",
            prompt="please hang",
            diagnostic="killed by SIGKILL",
            wait_until_running=asked,
            induce=kill_child(DSH_ACP),
        )
    if fault is Fault.CHILD_HANG:
        return FaultCase(
            provider(turn_timeout=1.0),
            "error",
            prompt="please hang",
            diagnostic="turn_timeout",
            settle_bound=5.0,
        )
    if fault is Fault.IGNORES_CANCEL:
        return FaultCase(
            provider(),
            "aborted",
            prompt="please hang",
            diagnostic="did not confirm the cancel",
            wait_until_running=asked,
            induce=freeze_agent(DSH_ACP),
            settle_bound=3.0,
        )
    if fault is Fault.GARBAGE_OUTPUT:
        return FaultCase(provider(), "error", prompt="please garbage", diagnostic="malformed")
    if fault is Fault.HTTP_500:
        return FaultCase(provider(), "error", prompt="please fail", diagnostic="500")
    if fault is Fault.APPROVAL_REQUEST:
        # run_command needs approval here: dsh acp asks its client (session/
        # request_permission), the provider rejects (its default), the model is told
        return FaultCase(provider(), "completed", prompt="please run sleep", output="did not allow")
    assert fault is Fault.PARENT_SIGKILL
    args = ["-m", "dsh.cli", "acp", "--preset", str(preset)]
    config = {"name": name, "command": sys.executable, "args": args, **GRACES}
    return FaultCase(
        name,
        TREE_GONE,
        prompt="please run sleep",
        parent_process=ParentProcess(
            plugins=[("dsh-subagent-acp", config)], cwd=str(preset.parent)
        ),
    )


class TestAcpMockAgentFaults(FaultMatrix):
    """The mock ACP agent: ``crash``, ``hang``, ``ignore-cancel --ignore-eof``,
    ``garbage``, ``error``, ``permission`` modes; ``--escapee`` for the SIGKILL."""

    @pytest.fixture
    def fault_harness(self, fault: Fault, rig: Any, tmp_path: Path) -> FaultHarness:
        return FaultHarness(rig.ctx, rig.parent, mock_case(fault, rig, tmp_path))


@pytest.fixture
def chat_server() -> Iterator[OpenAIChatServer]:
    """The ``dsh acp`` child's model (see :func:`dsh.testing.faults.fault_chat_server`)."""
    with fault_chat_server() as server:
        yield server


class TestAcpDshAcpFaults(FaultMatrix):
    """A real ``dsh acp`` child (``python -m dsh.cli acp --preset ...``)."""

    @pytest.fixture
    def fault_harness(
        self, fault: Fault, rig: Any, tmp_path: Path, chat_server: OpenAIChatServer
    ) -> FaultHarness:
        ask = fault is Fault.APPROVAL_REQUEST
        permission = ', command_permission = "ask"' if ask else ""
        preset = tmp_path / "child.toml"
        text = CHILD_PRESET.format(api_base=chat_server.api_base, permission=permission)
        preset.write_text(text, encoding="utf-8")
        return FaultHarness(rig.ctx, rig.parent, dsh_case(fault, rig, preset, chat_server))
