"""A budget on a Claude Code child, enforced from the parent side: the real CLI
against the fake Messages API, a model that never stops calling tools. The run is
stopped within one model call of its cap, settles ``budget`` and leaves nothing
running; a cap the CLI's reports cannot enforce (``usd``, ``children``) is refused
before any process starts."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal
from dsh.subagent import Budget, SubagentError, SubagentResult, SubagentStartRequest
from dsh.testing.model_servers import MessagesReply, ToolUse
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PER_CALL = {"input_tokens": 90, "output_tokens": 10}
LOOP = MessagesReply(
    text="again",
    tool_uses=[ToolUse("Bash", {"command": "echo again", "description": "loop"})],
    usage=PER_CALL,
)


async def budgeted(setup: Any, prompt: str, budget: Budget) -> SubagentResult:
    request = SubagentStartRequest(prompt, setup.parent, AbortSignal(), budget=budget)
    run = await setup.runtime.start(setup.provider.name, request)
    async with run:
        with anyio.fail_after(90):
            result: SubagentResult = await run.result
    return result


@pytest.mark.parametrize("config_fields", [{"allowed_tools": ["Bash"]}])
@pytest.mark.parametrize(
    ("budget", "diagnostic"),
    [
        (Budget(tokens=500), "token budget 500 reached: 500 tokens used"),
        (Budget(turns=4), "turn budget 4 reached: 4 model calls made"),
    ],
)
async def test_a_looping_child_is_stopped_at_its_cap(
    setup: Any, budget: Budget, diagnostic: str
) -> None:
    setup.server.when("DSH-LOOP", LOOP)
    before = live_children()
    result = await budgeted(setup, "DSH-LOOP: keep going", budget)
    assert result.stop_reason == "budget", result
    assert result.diagnostic == diagnostic
    calls = len(setup.server.matching("DSH-LOOP"))
    assert 5 - (budget.turns is not None) <= calls <= 5 + 1  # the cap, plus one in flight
    with anyio.fail_after(10):
        while live_children() - before:
            await anyio.sleep(0.05)


@pytest.mark.parametrize(
    ("budget", "cap"), [(Budget(usd=0.5), "usd"), (Budget(tokens=9, children=2), "children")]
)
async def test_a_cap_it_cannot_enforce_is_refused_before_any_process(
    setup: Any, budget: Budget, cap: str
) -> None:
    before = live_children()
    request = SubagentStartRequest("DSH-NEVER", setup.parent, AbortSignal(), budget=budget)
    with pytest.raises(SubagentError, match=f"cannot enforce a {cap} budget") as refused:
        await setup.runtime.start("claude-code", request)
    assert refused.value.code == "UNSUPPORTED_CAPABILITY"
    assert live_children() == before
    assert setup.server.requests == []
