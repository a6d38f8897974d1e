"""Permission requests are answered by the configured policy, never left open."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_default_policy_rejects_with_a_reject_once_option(rig: Any) -> None:
    result = await rig.run(rig.mock("permission"))
    assert (result.stop_reason, result.output) == ("completed", "permission: reject_once")


async def test_allow_policy_picks_allow_once_not_allow_always(rig: Any) -> None:
    result = await rig.run(rig.mock("permission", name="acp-allow", permission="allow"))
    assert (result.stop_reason, result.output) == ("completed", "permission: allow_once")


async def test_failure_diagnostic_reports_the_permission_answers(rig: Any) -> None:
    config = rig.mock("permission", "--stop-reason", "refusal", name="acp-perm-refusal")
    result = await rig.run(config)
    assert (result.stop_reason, result.output) == ("refusal", "permission: reject_once")
    assert result.diagnostic == (
        "acp-perm-refusal session/prompt: the agent stopped with stop reason 'refusal'\n"
        "permission requests (reject policy): 1 answered reject_once"
    )


async def test_after_cancel_permission_requests_are_answered_cancelled(rig: Any) -> None:
    signal = AbortSignal()
    config = rig.mock("ask-after-cancel", name="acp-ask", permission="allow", cancel_grace=5.0)
    run = await rig.start(config, signal=signal)
    async with run:
        with anyio.fail_after(30):  # the agent is at work: it said so
            async with run.progress() as items:
                async for item in items:
                    if item.kind == "text":
                        break
        signal.abort("parent cancelled")
        with anyio.fail_after(10):
            result = await run.result
    assert result.stop_reason == "aborted"
    assert result.diagnostic == "parent cancelled"  # the agent confirmed the cancel
    assert result.output == "permission: cancelled"  # not allow_once, despite the policy
