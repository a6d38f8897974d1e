"""The acp provider against agents that answer badly, and notices (issue 10: items 6, 9).

(That an abort does not wait for a cancel that could not be sent is a kit rule, tested
in dsh-subagent's test_remote_run.py.)"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.fixtures import progress_and_result
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("bad-error", "a JSON line that is not a valid JSON-RPC message"),
        ("wrong-id", "an answer to a request it was never sent"),
    ],
)
@pytest.mark.timeout(300)
async def test_a_malformed_answer_fails_the_run_at_once(rig: Any, mode: str, says: str) -> None:
    before = live_children()
    started = time.monotonic()
    with anyio.fail_after(240):
        result = await rig.run(rig.mock(mode, turn_timeout=120))
    # at once: well before turn_timeout (a run that waited for it takes >= 120 s); the
    # margin is for a loaded machine, where the start alone can take seconds
    assert time.monotonic() - started < 60
    assert result.stop_reason == "error", result
    assert says in (result.diagnostic or "")
    assert "session/prompt got no answer" in (result.diagnostic or "")
    assert_no_new_processes(before)


async def test_half_a_line_is_bounded_by_the_default_turn_timeout(rig: Any) -> None:
    config = rig.mock("partial-line")
    assert config.turn_timeout == 900  # on by default: a silent agent cannot hang a run
    short = rig.mock("partial-line", turn_timeout=1, name="acp-partial-short")
    with anyio.fail_after(50):  # generous: turn_timeout (its diagnostic) ends it, not this
        result = await rig.run(short)
    assert result.stop_reason == "error"
    assert "no answer within turn_timeout = 1 s" in (result.diagnostic or "")


async def test_a_notice_is_never_the_answer(rig: Any) -> None:
    """We declare session.notices, so the agent sends its notice as a notice, which
    is reported as progress and kept out of the output."""
    items, result = await progress_and_result(await rig.start(rig.mock("notice")))
    assert result.stop_reason == "completed"
    assert result.output == "The answer."
    notices = [i.text for i in items if i.kind == "notice"]
    assert notices == ["Warning: auto mode uses a classifier"]
    assert [i.text for i in items if i.kind == "text"] == ["Working.", "The answer."]


async def test_the_depth_limit_needs_an_agent_that_confirms_it(rig: Any) -> None:
    from dsh.subagent import StartFailed

    with pytest.raises(StartFailed, match=r"depth_limit = true but the agent does not confirm"):
        await rig.start(rig.mock("normal", depth_limit=True, name="acp-depth"))


async def test_progress_maps_the_agents_updates_in_order(rig: Any) -> None:
    items, result = await progress_and_result(await rig.start(rig.mock("narrate")), within=20)
    kinds = [i.kind for i in items]
    assert kinds == ["text", "tool_call", "tool_update", "text", "text", "usage"], kinds
    call, update = items[1], items[2]
    assert (call.tool_call_id, call.title, call.name) == ("t1", "look it up", "search")
    assert (update.tool_call_id, update.status) == ("t1", "completed")
    assert result.output == "The answer is 42."
    assert result.usage == {"input_tokens": 30, "output_tokens": 12}
