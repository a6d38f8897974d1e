"""Every fault of the mock ACP agent settles with the right stop reason and a
useful diagnostic, within a bound, and leaves no process behind."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentError
from dsh.subagent_acp import AcpProviderConfig
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

GRACES: dict[str, Any] = {"eof_grace": 0.5, "term_grace": 0.5, "cancel_grace": 1.0}


async def test_reply_is_folded_in_wire_order_with_usage(rig: Any) -> None:
    words = [f"w{i}" for i in range(400)]  # 402 chunks, each its own notification task
    result = await rig.run(rig.mock("normal"), " ".join(words))
    assert result.stop_reason == "completed", result
    assert result.output == "You said: " + " ".join(words)
    assert result.diagnostic is None
    assert result.usage == {"input_tokens": 400, "output_tokens": 402}
    assert result.usage.total_tokens == 802


async def test_output_is_the_last_message_not_the_narration(rig: Any) -> None:
    result = await rig.run(rig.mock("narrate"))
    assert result.stop_reason == "completed", result
    assert result.output == "The answer is 42."


@pytest.mark.parametrize(
    ("acp_reason", "stop_reason"),
    [
        ("max_tokens", "max-tokens"),
        ("refusal", "refusal"),
        ("cancelled", "aborted"),
        ("max_turn_requests", "error"),
    ],
)
async def test_stop_reasons_map(rig: Any, acp_reason: str, stop_reason: str) -> None:
    config = rig.mock("normal", "--stop-reason", acp_reason, name=f"acp-{acp_reason}")
    result = await rig.run(config, "partial")
    assert result.stop_reason == stop_reason, result
    assert result.output == "You said: partial"
    assert result.diagnostic is not None
    assert acp_reason in result.diagnostic or stop_reason == "aborted"


async def test_crash_mid_turn_is_an_error_with_exit_status_and_stderr(rig: Any) -> None:
    before = live_children()
    started = time.monotonic()
    result = await rig.run(rig.mock("crash", **GRACES))
    assert time.monotonic() - started < 30
    assert result.stop_reason == "error", result
    assert result.output == "about to crash"  # the partial output survives
    diagnostic = result.diagnostic or ""
    assert "acp-crash session/prompt failed" in diagnostic
    assert "the agent exited (exit status 3) before answering session/prompt" in diagnostic
    assert "mock agent: crashing on purpose" in diagnostic
    assert_no_new_processes(before)


async def test_garbage_on_stdout_is_an_error_not_a_crash_of_the_parent(rig: Any) -> None:
    before = live_children()
    result = await rig.run(rig.mock("garbage", **GRACES))
    assert result.stop_reason == "error", result
    diagnostic = result.diagnostic or ""
    assert "the agent wrote a line that is not JSON: 'this is not json'" in diagnostic
    assert "session/prompt got no answer" in diagnostic
    assert_no_new_processes(before)
    # the parent is fine: the same context runs another child to completion
    again = await rig.run(rig.mock("normal"), "still alive")
    assert (again.stop_reason, again.output) == ("completed", "You said: still alive")


async def test_garbage_can_be_skipped_for_agents_that_print_banners(rig: Any) -> None:
    config = rig.mock("garbage", name="acp-banners", stdout_garbage="skip")
    result = await rig.run(config, "ok")
    assert (result.stop_reason, result.output) == ("completed", "You said: ok")


async def test_huge_output_arrives_whole(rig: Any) -> None:
    result = await rig.run(rig.mock("huge", "--huge-mb", "6"))
    assert result.stop_reason == "completed", result.diagnostic
    size = 256 * 1024
    assert len(result.output) == 6 * 1024 * 1024
    for index in range(24):
        chunk = result.output[index * size : (index + 1) * size]
        assert chunk == "abcdefghijklmnopqrstuvwxyz"[index % 26] * size


async def test_a_line_over_the_cap_fails_the_run(rig: Any) -> None:
    config = rig.mock(
        "huge", "--huge-mb", "2", "--chunk-kb", "2048", name="acp-cap", max_message_bytes=1 << 20
    )
    result = await rig.run(config)
    assert result.stop_reason == "error", result
    assert "a line longer than 1048576 bytes" in (result.diagnostic or "")


async def test_json_rpc_error_answer_is_an_error_result(rig: Any) -> None:
    result = await rig.run(rig.mock("error"))
    assert result.stop_reason == "error", result
    assert "the agent answered session/prompt with error -32603 (Internal error)" in (
        result.diagnostic or ""
    )
    assert "the mock agent fails this prompt" in (result.diagnostic or "")


async def test_hang_with_turn_timeout_is_an_error(rig: Any) -> None:
    before = live_children()
    started = time.monotonic()
    result = await rig.run(rig.mock("hang", turn_timeout=1.0, **GRACES))
    assert result.stop_reason == "error", result
    assert "acp-hang turn failed: no answer within turn_timeout = 1 s" in (result.diagnostic or "")
    assert result.output == "working on it"
    assert time.monotonic() - started < 30
    assert_no_new_processes(before)


async def test_cancel_reaches_an_agent_that_honours_it(rig: Any) -> None:
    signal = AbortSignal()
    run = await rig.start(rig.mock("hang", **{**GRACES, "cancel_grace": 10.0}), signal=signal)
    async with run:
        await _at_work(run)
        started = time.monotonic()
        signal.abort("parent changed its mind")
        with anyio.fail_after(15):
            result = await run.result
        assert time.monotonic() - started < 5.0  # confirmed, not the 10 s grace waited out
    assert result.stop_reason == "aborted"
    assert result.diagnostic == "parent changed its mind"
    assert result.output == "working on it"


async def _at_work(run: Any) -> None:
    """Until the mock agent says it is at work (its first text progress)."""
    with anyio.fail_after(30):
        async with run.progress() as items:
            async for item in items:
                if item.kind == "text":
                    return


async def test_agent_that_ignores_cancel_and_eof_is_killed_within_the_graces(
    unsandboxed_rig: Any,
) -> None:
    before = live_children()
    config = unsandboxed_rig.mock("ignore-cancel", "--ignore-eof", **GRACES)
    signal = AbortSignal()
    run = await unsandboxed_rig.start(config, signal=signal)
    await _at_work(run)
    started = time.monotonic()
    signal.abort("stop now")
    with anyio.fail_after(10):
        result = await run.result
    settled = time.monotonic() - started
    assert result.stop_reason == "aborted"
    assert "stop now (acp-ignore-cancel did not confirm the cancel within 1 s" in (
        result.diagnostic or ""
    )
    assert 0.9 <= settled < 1.0 + 1.5  # cancel_grace, then on
    started = time.monotonic()
    await run.dispose()
    disposed = time.monotonic() - started
    # stdin EOF ignored (0.5 s), SIGTERM ignored (0.5 s), then SIGKILL
    assert 0.9 <= disposed < 1.0 + 1.5
    assert_no_new_processes(before, within=5.0)


async def test_slow_eof_agent_is_killed_within_the_graces(unsandboxed_rig: Any) -> None:
    before = live_children()
    run = await unsandboxed_rig.start(unsandboxed_rig.mock("slow-eof", **GRACES), "done soon")
    result = await run.result
    assert (result.stop_reason, result.output) == ("completed", "You said: done soon")
    started = time.monotonic()
    await run.dispose()
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 1.0 + 1.5
    assert_no_new_processes(before, within=5.0)


async def test_tool_process_in_its_own_session_is_killed_too(rig: Any) -> None:
    before = live_children()
    result = await rig.run(rig.mock("normal", "--escapee", name="acp-escapee", **GRACES))
    assert result.stop_reason == "completed"
    # the escapee left the agent's process group; the run's process tag still finds it
    assert_no_new_processes(before, within=5.0)


async def test_polite_agent_exits_on_eof_without_waiting_the_graces(rig: Any) -> None:
    config = rig.mock("normal", name="acp-polite", eof_grace=10.0, term_grace=10.0)
    run = await rig.start(config)
    await run.result
    started = time.monotonic()
    await run.dispose()
    assert time.monotonic() - started < 5.0  # not the 10 s EOF grace


# -- start-up failures: raise START_FAILED / ABORTED, leave nothing ------------------------


async def test_missing_command_fails_to_start(rig: Any) -> None:
    config = AcpProviderConfig(name="acp-missing", command="/nonexistent/acp-agent")
    with pytest.raises(SubagentError) as info:
        await rig.start(config)
    assert info.value.code == "START_FAILED"
    assert "could not start acp-missing agent '/nonexistent/acp-agent'" in info.value.message


async def test_agent_that_exits_at_start_fails_to_start(rig: Any) -> None:
    before = live_children()
    with pytest.raises(SubagentError) as info:
        await rig.start(rig.mock("exit-on-start"))
    assert info.value.code == "START_FAILED"
    assert "the agent exited (exit status 7) before answering initialize" in info.value.message
    assert "refusing to start (exit-on-start mode)" in info.value.message
    assert_no_new_processes(before, within=5.0)


async def test_bad_handshake_fails_to_start(rig: Any) -> None:
    before = live_children()
    with pytest.raises(SubagentError) as info:
        await rig.start(rig.mock("bad-init"))
    assert info.value.code == "START_FAILED"
    assert "the agent speaks ACP protocol version 99" in info.value.message
    assert_no_new_processes(before, within=5.0)


async def test_slow_start_times_out(rig: Any) -> None:
    before = live_children()
    config = rig.mock("slow-start", "--delay", "60", start_timeout=1.0, term_grace=1.0)
    started = time.monotonic()
    with pytest.raises(SubagentError) as info:
        await rig.start(config)
    assert time.monotonic() - started < 1.0 + 8.0  # the timeout, not the agent's 60 s
    assert info.value.code == "START_FAILED"
    assert (
        "acp-slow-start did not start within start_timeout = 1 s (stage: initialize)"
        in info.value.message
    )
    assert_no_new_processes(before, within=5.0)


async def test_abort_during_start_raises_aborted_and_leaves_nothing(rig: Any) -> None:
    before = live_children()
    signal = AbortSignal()
    config = rig.mock("slow-start", "--delay", "60", term_grace=1.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_abort_later, signal, 0.5)
        started = time.monotonic()
        with pytest.raises(SubagentError) as info:
            await rig.start(config, signal=signal)
        assert time.monotonic() - started < 0.5 + 8.0  # the abort, not the agent's 60 s
    assert info.value.code == "ABORTED"
    assert "caller gave up" in info.value.message
    assert_no_new_processes(before, within=5.0)


async def _abort_later(signal: AbortSignal, delay: float) -> None:
    await anyio.sleep(delay)
    signal.abort("caller gave up")


# -- where and with what the agent runs ---------------------------------------------------


async def test_cwd_defaults_to_the_parent_session_and_env_is_scrubbed(
    rig: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-secret-do-not-pass")
    config = rig.mock("inspect", env={"FAKE_API_KEY": "configured"})
    result = await rig.run(config)
    facts = json.loads(result.output)
    expected = os.path.realpath(tmp_path)
    assert facts["session_cwd"] == expected
    assert os.path.realpath(facts["process_cwd"]) == expected
    assert facts["env"]["FAKE_API_KEY"] == "configured"
    assert "OPENAI_API_KEY" not in facts["env"]
    assert facts["env"]["PATH"] == os.environ["PATH"]


async def test_configured_cwd_wins(rig: Any, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    result = await rig.run(rig.mock("inspect", name="acp-cwd", cwd=str(work)))
    assert json.loads(result.output)["session_cwd"] == str(work)


async def test_bad_cwd_is_refused_before_anything_starts(rig: Any, tmp_path: Path) -> None:
    before = live_children()
    config = rig.mock("normal", name="acp-nodir", cwd=str(tmp_path / "missing"))
    with pytest.raises(SubagentError, match=r"acp-nodir provider cwd .* is not a directory"):
        await rig.start(config)
    rig.parent.session.header.meta.pop("cwd")
    with pytest.raises(SubagentError, match="no cwd configured and the parent session records"):
        await rig.start(rig.mock("normal"))
    assert_no_new_processes(before, within=5.0)
    with pytest.raises(ValueError, match="cwd must be an absolute path, got 'relative'"):
        AcpProviderConfig(command=sys.executable, cwd="relative")
