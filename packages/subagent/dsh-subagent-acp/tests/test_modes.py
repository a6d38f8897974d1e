"""Session modes (issue 21 item 11): under ``permission = "reject"`` the provider puts
an agent that offers modes in one that asks (``session/set_mode``), and refuses the
run, or warns, when the agent does not confirm it. The mock agent approves its own
tool calls in mode ``auto``, as claude-agent-acp does."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from dsh.subagent import StartFailed

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

MODES = ("--modes", "default,acceptEdits,auto")
"""Offered like claude-agent-acp's; the session starts in ``auto`` (the last one)."""


async def test_reject_policy_puts_a_self_approving_agent_in_a_mode_that_asks(rig: Any) -> None:
    result = await rig.run(rig.mock("permission", *MODES, name="acp-modes"))
    # without session/set_mode the agent would have said "permission: self-approved"
    assert (result.stop_reason, result.output) == ("completed", "permission: reject_once")
    # an agent already in a mode that asks gets no session/set_mode (it would refuse it)
    offered = ("--modes", "default,auto", "--initial-mode", "default", "--refuse-set-mode")
    result = await rig.run(rig.mock("permission", *offered, name="acp-already"))
    assert (result.stop_reason, result.output) == ("completed", "permission: reject_once")


async def test_session_mode_names_the_mode_to_select(rig: Any) -> None:
    offered = ("--modes", "ask,auto")  # "ask" is no id the provider knows to ask
    config = rig.mock("permission", *offered, name="acp-ask-mode", session_mode="ask")
    result = await rig.run(config)
    assert (result.stop_reason, result.output) == ("completed", "permission: reject_once")


async def test_a_refused_set_mode_refuses_the_run_under_reject(rig: Any) -> None:
    config = rig.mock("permission", *MODES, "--refuse-set-mode", name="acp-refused")
    with pytest.raises(StartFailed) as failed:
        await rig.start(config)
    message = failed.value.message
    assert message.startswith("acp-refused session/set_mode: the agent answered session/set_mode")
    assert "the mock agent refuses to switch modes" in message
    assert "(offered: default, acceptEdits, auto; current: auto)" in message
    assert 'with permission = "reject" the agent in its own mode (auto) may approve' in message
    assert 'on_unconfirmed = "warn"' in message


async def test_warn_runs_the_agent_in_its_own_mode_and_logs_why(
    rig: Any, caplog: pytest.LogCaptureFixture
) -> None:
    config = rig.mock(
        "permission", *MODES, "--refuse-set-mode", name="acp-warned", on_unconfirmed="warn"
    )
    with caplog.at_level(logging.WARNING, logger="dsh.subagent_acp"):
        result = await rig.run(config)
    assert (result.stop_reason, result.output) == ("completed", "permission: self-approved")
    warnings = [r.getMessage() for r in caplog.records if r.name == "dsh.subagent_acp"]
    assert len(warnings) == 1
    assert warnings[0].startswith("acp-warned session/set_mode: the agent answered")
    assert 'on_unconfirmed = "warn": running anyway' in warnings[0]


async def test_no_mode_that_asks_refuses_the_run(rig: Any) -> None:
    config = rig.mock("permission", "--modes", "auto,bypassPermissions", name="acp-no-asking")
    with pytest.raises(StartFailed) as failed:
        await rig.start(config)
    assert failed.value.message.startswith(
        "acp-no-asking session/set_mode: the agent offers no mode known to ask before acting"
        " (default, read-only) (offered: auto, bypassPermissions; current: bypassPermissions)"
    )
    assert "Fix: set session_mode to the agent's mode that asks before acting" in (
        failed.value.message
    )


async def test_a_mode_the_agent_does_not_offer_refuses_the_run(rig: Any) -> None:
    config = rig.mock("permission", *MODES, name="acp-not-offered", session_mode="read-only")
    with pytest.raises(StartFailed) as failed:
        await rig.start(config)
    assert "the agent does not offer mode 'read-only'" in failed.value.message


async def test_no_modes_with_session_mode_refuses_under_reject(rig: Any) -> None:
    config = rig.mock("permission", name="acp-modeless", session_mode="default")
    with pytest.raises(StartFailed) as failed:
        await rig.start(config)
    assert failed.value.message.startswith(
        "acp-modeless session/set_mode: session/new reported no session modes, so the agent"
        " cannot confirm session_mode = 'default'"
    )


async def test_no_modes_with_session_mode_warns_when_told(
    rig: Any, caplog: pytest.LogCaptureFixture
) -> None:
    config = rig.mock(
        "permission", name="acp-modeless-warn", session_mode="default", on_unconfirmed="warn"
    )
    with caplog.at_level(logging.WARNING, logger="dsh.subagent_acp"):
        result = await rig.run(config)
    assert (result.stop_reason, result.output) == ("completed", "permission: reject_once")
    assert any("reported no session modes" in r.getMessage() for r in caplog.records)


async def test_allow_policy_with_session_mode_warns_by_default(
    rig: Any, caplog: pytest.LogCaptureFixture
) -> None:
    config = rig.mock(
        "permission",
        *MODES,
        "--refuse-set-mode",
        name="acp-allow-warn",
        permission="allow",
        session_mode="default",
    )
    with caplog.at_level(logging.WARNING, logger="dsh.subagent_acp"):
        result = await rig.run(config)
    assert (result.stop_reason, result.output) == ("completed", "permission: self-approved")
    assert any("the agent runs in its own mode (auto)" in r.getMessage() for r in caplog.records)


async def test_a_pooled_run_selects_the_mode_of_its_own_session(rig: Any) -> None:
    config = rig.mock("permission", *MODES, name="acp-pooled-modes", pool={"size": 1})
    for _ in range(2):  # the second run takes the warm process back, with a new session
        result = await rig.run(config)
        assert (result.stop_reason, result.output) == ("completed", "permission: reject_once")
