"""The codex provider through the fault matrix (:mod:`dsh.testing.faults`): the real
``codex app-server`` against the fake Responses API (``conftest.standard_rules``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

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
    until_child_process,
)
from dsh.testing.fixtures import FAST_GRACES, child_process_case, until_asked
from dsh.testing.model_servers import ResponsesReply

pytestmark = pytest.mark.timeout(60)

GRACES = FAST_GRACES
CODEX = "app-server"
"""A piece of the codex child's command line."""
HANG = "hang until cancelled"


def codex_case(fault: Fault, codex: Any) -> tuple[FaultCase, dict[str, Any]]:
    """The case of ``fault`` and the provider config overrides it needs."""
    server = codex.server

    running = until_asked(server, HANG, "codex")
    shared = child_process_case(fault, "codex", CODEX, prompt=HANG, running=running)
    if shared is not None:  # cancel mid-turn, double cancel, crash, ignores-cancel
        return shared, {}
    if fault is Fault.CANCEL_BEFORE_PUBLICATION:
        case = FaultCase(
            "codex",
            START_ABORTED,
            prompt=HANG,
            abort_during_start=until_child_process(CODEX),
            settle_bound=3.0,
        )
        return case, {}
    if fault is Fault.CHILD_HANG:
        case = FaultCase(
            "codex", "error", prompt=HANG, diagnostic="turn_timeout = 1 s", settle_bound=5.0
        )
        return case, {"turn_timeout": 1.0}
    if fault is Fault.GARBAGE_OUTPUT:
        # the whole body is garbage (codex skips one bad event inside a good stream)
        garbage = ResponsesReply(text="unseen", faults=GARBAGE_BODY)
        server.when("emit garbage", garbage)
        return FaultCase(
            "codex", "error", prompt="emit garbage", diagnostic="codex turn failed"
        ), {}
    if fault is Fault.HTTP_500:
        case = FaultCase(
            "codex", "error", prompt="fail with a server error", diagnostic="internalServerError"
        )
        return case, {}
    if fault is Fault.APPROVAL_REQUEST:
        # read-only (the default): codex asks to escalate; the policy declines at once
        case = FaultCase(
            "codex", "completed", prompt="escalate and touch", output="rejected by user"
        )
        return case, {}
    assert fault is Fault.PARENT_SIGKILL
    config = codex.config(permission_mode="full-access", **GRACES)
    parent = ParentProcess(plugins=[("dsh-subagent-codex", config)], cwd=str(codex.workspace))
    return FaultCase("codex", TREE_GONE, prompt="run sleep", parent_process=parent), {}


class TestCodexFaults(FaultMatrix):
    """Real codex; the fake model hangs, fails, streams garbage or asks to escalate."""

    @pytest.fixture
    async def fault_harness(self, fault: Fault, codex: Any) -> AsyncIterator[FaultHarness]:
        case, overrides = codex_case(fault, codex)
        async with codex.context(**{**GRACES, **overrides}) as (ctx, parent):
            yield FaultHarness(ctx, parent, case)
