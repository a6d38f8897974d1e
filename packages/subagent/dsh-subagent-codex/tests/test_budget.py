"""A budget on a codex child, enforced from the parent side: the real ``codex
app-server`` against the fake Responses API, a model that never stops calling
tools. The run is stopped within one token report of its cap, settles ``budget``
and leaves nothing running; a cap codex's reports cannot enforce is refused before
any process starts."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal
from dsh.subagent import Budget, SubagentError, SubagentRuntime, SubagentStartRequest
from dsh.testing.model_servers.openai_responses import FunctionCall, ResponsesReply
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

LOOP = ResponsesReply(
    text="again",
    function_calls=[FunctionCall("exec_command", {"cmd": "true"})],
    usage={"input_tokens": 90, "output_tokens": 10},
)


async def test_a_looping_child_is_stopped_at_its_token_cap(codex: Any, procs: Any) -> None:
    codex.server.when("spin in circles", LOOP)
    async with codex.context() as (ctx, parent):
        before = live_children()
        request = SubagentStartRequest(
            "spin in circles", parent, AbortSignal(), budget=Budget(tokens=500)
        )
        run = await SubagentRuntime.of(ctx).start("codex", request)
        async with run:
            with anyio.fail_after(60):
                result = await run.result
        assert await procs.new_tree_settled(before) == set()
    assert result.stop_reason == "budget", result
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("token budget 500 reached: ")
    calls = len(codex.server.matching("spin in circles"))
    assert 5 <= calls <= 5 + 1, calls  # 100 tokens a call: the cap, plus one in flight


@pytest.mark.parametrize("cap", ["usd", "turns", "children"])
async def test_a_cap_it_cannot_enforce_is_refused_before_any_process(codex: Any, cap: str) -> None:
    async with codex.context() as (ctx, parent):
        before = live_children()
        budget = Budget(**{cap: 1})
        request = SubagentStartRequest("say hello", parent, AbortSignal(), budget=budget)
        with pytest.raises(SubagentError, match=f"cannot enforce a {cap} budget") as refused:
            await SubagentRuntime.of(ctx).start("codex", request)
        assert refused.value.code == "UNSUPPORTED_CAPABILITY"
        assert live_children() == before
    assert codex.server.requests == []
