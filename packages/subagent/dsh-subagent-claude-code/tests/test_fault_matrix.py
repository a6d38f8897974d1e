"""The claude-code provider through the fault matrix (:mod:`dsh.testing.faults`): the
real Claude Code CLI bundled in claude-agent-sdk, offline, against the fake Messages
API. Prompts carry ``DSH-FM-...`` markers (the CLI wraps the user's words)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from dsh.testing.faults import (
    GARBAGE_BODY,
    START_ABORTED,
    TREE_GONE,
    Fault,
    FaultCase,
    FaultHarness,
    FaultMatrix,
    ParentProcess,
    one_tick,
)
from dsh.testing.model_servers import (
    AnthropicMessagesServer,
    Hang,
    HTTPError,
    MessagesReply,
    ToolUse,
)
from dsh.testing.model_servers.anthropic_messages import reply_with_tool_result

if TYPE_CHECKING:
    from conftest import Setup

from dsh.testing.fixtures import FAST_GRACES, child_process_case, until_asked

pytestmark = pytest.mark.timeout(60)

GRACES = FAST_GRACES
CLI = "stream-json"
"""A piece of the CLI child's command line."""
HANG = "DSH-FM-HANG"

CONFIG: dict[Fault, dict[str, Any]] = {
    Fault.CHILD_HANG: {"turn_timeout": 1.0},
    Fault.APPROVAL_REQUEST: {"permission_mode": "default"},  # a mode that asks
    Fault.PARENT_SIGKILL: {"allowed_tools": ["Bash"]},
}
"""Provider config fields per fault (on top of :data:`GRACES`)."""


def bash(command: str) -> MessagesReply:
    return MessagesReply(tool_uses=[ToolUse("Bash", {"command": command, "description": "probe"})])


def claude_case(fault: Fault, setup: Setup) -> FaultCase:
    server: AnthropicMessagesServer = setup.server
    name = setup.provider.name
    server.when(HANG, Hang())

    running = until_asked(server, HANG, "the CLI")
    case = child_process_case(fault, name, CLI, prompt=HANG, running=running)
    if case is not None:  # cancel mid-turn, double cancel, crash, ignores-cancel
        return case
    if fault is Fault.CANCEL_BEFORE_PUBLICATION:
        # the CLI's handshake runs in the turn (after publication): abort while it spawns
        return FaultCase(
            name, START_ABORTED, prompt=HANG, abort_during_start=one_tick(), settle_bound=3.0
        )
    if fault is Fault.CHILD_HANG:
        return FaultCase(name, "error", prompt=HANG, diagnostic="turn_timeout", settle_bound=5.0)
    if fault is Fault.GARBAGE_OUTPUT:
        # the whole body is one line that is not an SSE event, then the connection closes
        garbage = MessagesReply(text="unseen", faults=GARBAGE_BODY)
        server.when("DSH-FM-GARBAGE", garbage)
        return FaultCase(name, "error", prompt="DSH-FM-GARBAGE", diagnostic="model API error")
    if fault is Fault.HTTP_500:
        server.when("DSH-FM-500", HTTPError(500, "fault matrix: the model server failed"))
        return FaultCase(name, "error", prompt="DSH-FM-500", diagnostic="HTTP 500")
    if fault is Fault.APPROVAL_REQUEST:
        # permission_mode "default": the CLI asks before Bash; the provider denies at once
        server.when(
            "DSH-FM-ASK", bash("touch asked.txt"), reply_with_tool_result("Could not: {output}")
        )
        return FaultCase(name, "completed", prompt="DSH-FM-ASK", output="cannot ask for approval")
    assert fault is Fault.PARENT_SIGKILL
    # the CLI blocks a standalone `sleep 300` ("Blocked: standalone sleep 300"); under
    # timeout(1) it is the same sleep 300, in a process group of timeout's own
    server.when("DSH-FM-SLEEP", bash("timeout 400 sleep 300"), "unreachable")
    config = setup.provider.config.model_dump(mode="json", exclude_defaults=True)
    parent = ParentProcess(plugins=[("dsh-subagent-claude-code", config)], cwd=str(setup.workdir))
    return FaultCase(name, TREE_GONE, prompt="DSH-FM-SLEEP", parent_process=parent)


class TestClaudeCodeFaults(FaultMatrix):
    """The real CLI; the fake model hangs, fails, streams garbage or asks to run Bash."""

    @pytest.fixture
    def config_fields(self, fault: Fault) -> dict[str, Any]:
        """The provider config of this cell (the conftest's ``setup`` reads it)."""
        return {**GRACES, **CONFIG.get(fault, {})}

    @pytest.fixture
    def fault_harness(self, fault: Fault, setup: Setup) -> FaultHarness:
        return FaultHarness(setup.ctx, setup.parent, claude_case(fault, setup))
