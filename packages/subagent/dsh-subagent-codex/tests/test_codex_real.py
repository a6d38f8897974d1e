"""The codex provider against the real ``codex app-server``, offline (fake Responses API)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentError, SubagentRuntime, SubagentStartRequest, ToolFilter
from dsh.testing.model_servers.openai_responses import tool_outputs
from dsh.testing.processes import cmdline, live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def delegate(ctx: Any, parent: Any, prompt: str, **fields: Any) -> Any:
    """Start a codex run, await its result, dispose it."""
    run = await SubagentRuntime.of(ctx).start(
        "codex", SubagentStartRequest(prompt, parent, AbortSignal(), **fields)
    )
    try:
        with anyio.fail_after(30):
            return await run.result
    finally:
        await run.dispose()


async def test_completes_a_delegated_task_and_leaves_no_process(codex: Any, procs: Any) -> None:
    async with codex.context() as (ctx, parent):
        before = live_children()
        run = await SubagentRuntime.of(ctx).start(
            "codex", SubagentStartRequest("please say hello", parent, AbortSignal(), label="greet")
        )
        assert run.id.startswith("codex-")
        (child,) = live_children() - before
        assert procs.tree({child}) & procs.codex(), "the run's child is not the codex binary"
        with anyio.fail_after(30):
            result = await run.result
        # a completed run settles at once; dispose waits for the teardown
        with anyio.fail_after(5):
            await run.dispose()
        assert await procs.new_tree_settled(before) == set()
    assert result.stop_reason == "completed", result
    assert result.output == codex.hello
    assert result.diagnostic is None
    assert result.usage is not None
    assert result.usage["input_tokens"] > 0
    assert result.usage["output_tokens"] > 0
    (request,) = codex.server.matching("please say hello")
    body = request.json
    assert body["model"] == "gpt-5.5"
    assert body["stream"] is True
    # the thread ran in the parent's cwd (codex tells the model its environment)
    assert str(codex.workspace) in request.body.decode()


async def test_cancel_mid_stream_settles_aborted_and_the_tree_is_gone_within_1s(
    codex: Any, procs: Any
) -> None:
    async with codex.context() as (ctx, parent):
        before = live_children()
        signal = AbortSignal()
        run = await SubagentRuntime.of(ctx).start(
            "codex", SubagentStartRequest("stall please", parent, signal)
        )
        tree = procs.new_tree(before)
        assert tree & procs.codex()
        # the model has streamed two text deltas, then stalls with the connection open
        await codex.server.async_wait_until(lambda: bool(codex.server.matching("stall please")))
        await anyio.sleep(0.3)
        assert not run.settled
        cancelled = time.monotonic()
        signal.abort("parent gave up")
        gone_after = await procs.wait_gone(tree, timeout=1.0)
        with anyio.fail_after(1.0):
            result = await run.result
        settled_after = time.monotonic() - cancelled
        await run.dispose()
    assert gone_after < 1.0, f"process tree gone after {gone_after:.3f} s"
    assert settled_after < 1.0
    assert result.stop_reason == "aborted", result
    assert result.diagnostic == "parent gave up"
    # partial text from the deltas is kept
    assert result.output
    assert codex.stall_text.startswith(result.output)
    assert result.output != codex.stall_text
    (request,) = codex.server.matching("stall please")
    await codex.server.async_wait_until(lambda: request.client_disconnected, timeout=2)
    gone_ms, settled_ms = gone_after * 1000, settled_after * 1000
    print(f"cancel mid-stream: tree gone {gone_ms:.0f} ms, settled {settled_ms:.0f} ms")


async def test_cancel_during_a_running_tool_kills_the_tool_too(codex: Any, procs: Any) -> None:
    async with codex.context(permission_mode="full-access") as (ctx, parent):
        before = live_children()
        signal = AbortSignal()
        run = await SubagentRuntime.of(ctx).start(
            "codex", SubagentStartRequest("run sleep", parent, signal)
        )

        def sleeping() -> bool:
            return any("sleep 300" in cmdline(pid) for pid in procs.new_tree(before))

        await procs.wait_for(sleeping)
        tree = procs.new_tree(before)
        assert len(tree) >= 2  # codex and the tool's shell (in a session of its own)
        signal.abort("stop the tool")
        gone_after = await procs.wait_gone(tree, timeout=1.0)
        with anyio.fail_after(1.0):
            result = await run.result
        await run.dispose()
    assert result.stop_reason == "aborted", result
    assert gone_after < 1.0
    print(f"cancel during tool: tree of {len(tree)} gone {gone_after * 1000:.0f} ms")


async def test_http_500_settles_error_quickly_without_a_retry_storm(codex: Any) -> None:
    async with codex.context() as (ctx, parent):
        started = time.monotonic()
        result = await delegate(ctx, parent, "fail now")
        elapsed = time.monotonic() - started
        await anyio.sleep(0.5)  # a retrying client would have come back by now
    assert result.stop_reason == "error", result
    assert elapsed < 5.0
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("codex turn failed: ")
    assert "internalServerError" in result.diagnostic
    assert len(codex.server.matching("fail now")) == 1
    assert [r.status for r in codex.server.requests] == [500]


async def test_approval_request_is_declined_by_default(codex: Any) -> None:
    async with codex.context() as (ctx, parent):  # permission_mode = "read-only"
        result = await delegate(ctx, parent, "escalate and touch")
    assert result.stop_reason == "completed", result
    assert not (codex.workspace / "made_by_tool.txt").exists()
    _, second = codex.server.matching("escalate and touch")
    (output,) = tool_outputs(second)
    assert "rejected by user" in output
    assert "rejected by user" in result.output


async def test_approval_request_is_accepted_when_the_mode_allows(codex: Any) -> None:
    async with codex.context(permission_mode="auto-approve") as (ctx, parent):
        result = await delegate(ctx, parent, "escalate and touch")
    assert result.stop_reason == "completed", result
    assert (codex.workspace / "made_by_tool.txt").exists()
    assert result.output.rstrip().endswith("made")


async def test_turn_timeout_settles_error_when_the_model_never_answers(
    codex: Any, procs: Any
) -> None:
    async with codex.context(turn_timeout=1.0) as (ctx, parent):
        before = live_children()
        started = time.monotonic()
        run = await SubagentRuntime.of(ctx).start(
            "codex", SubagentStartRequest("hang forever", parent, AbortSignal())
        )
        with anyio.fail_after(5):
            result = await run.result
        elapsed = time.monotonic() - started
        assert await procs.new_tree_settled(before) == set()
        await run.dispose()
    assert result.stop_reason == "error", result
    assert 1.0 <= elapsed < 3.0
    assert result.diagnostic is not None
    assert "codex turn failed: no answer within turn_timeout = 1 s" in result.diagnostic
    (request,) = codex.server.matching("hang forever")
    assert request.status is None  # the server never sent headers


@pytest.mark.parametrize(
    ("fields", "capability"),
    [
        ({"output_schema": {"type": "object"}}, "output_schema"),
        ({"max_depth": 2}, "depth_limit"),
        ({"tool_filter": ToolFilter(allow=("read",))}, "tool_filter"),
        ({"persona": "You are terse."}, "persona"),
    ],
)
async def test_unsupported_capability_is_rejected_before_any_process_starts(
    codex: Any, procs: Any, fields: dict[str, Any], capability: str
) -> None:
    async with codex.context() as (ctx, parent):
        assert procs.codex() == set()
        before = live_children()
        seen: list[set[int]] = []

        async def watch() -> None:
            while True:
                seen.append(live_children() - before)
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            with pytest.raises(SubagentError) as info:
                await SubagentRuntime.of(ctx).start(
                    "codex",
                    SubagentStartRequest("please say hello", parent, AbortSignal(), **fields),
                )
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        assert info.value.code == "UNSUPPORTED_CAPABILITY"
        assert str(info.value) == (
            f'subagent provider "codex" does not support the "{capability}" capability'
        )
        assert all(not extra for extra in seen)
        assert live_children() == before
        assert procs.codex() == set()
    assert codex.server.requests == []


async def test_abort_during_the_handshake_raises_and_kills_codex(codex: Any, procs: Any) -> None:
    async with codex.context() as (ctx, parent):
        before = live_children()
        signal = AbortSignal()

        async def abort_once_codex_runs() -> None:
            await procs.wait_for(lambda: bool(procs.new_tree(before) & procs.codex()))
            signal.abort("changed my mind")

        async with anyio.create_task_group() as tg:
            tg.start_soon(abort_once_codex_runs)
            with pytest.raises(SubagentError) as info:
                await SubagentRuntime.of(ctx).start(
                    "codex", SubagentStartRequest("please say hello", parent, signal)
                )
        assert info.value.code == "ABORTED"
        assert "changed my mind" in str(info.value)
        assert await procs.new_tree_settled(before) == set()
    assert codex.server.requests == []


async def test_missing_command_fails_to_start(codex: Any, procs: Any) -> None:
    async with codex.context(command="/nonexistent/codex") as (ctx, parent):
        before = live_children()
        with pytest.raises(SubagentError) as info:
            await SubagentRuntime.of(ctx).start(
                "codex", SubagentStartRequest("please say hello", parent, AbortSignal())
            )
        assert live_children() == before
    assert info.value.code == "START_FAILED"
    assert "/nonexistent/codex" in info.value.message
    assert "install-codex.sh" in info.value.message


async def test_codex_exiting_during_the_handshake_fails_to_start(codex: Any, procs: Any) -> None:
    (codex.codex_home / "config.toml").write_text("model = \n")  # strict config: exit 1
    async with codex.context() as (ctx, parent):
        before = live_children()
        with pytest.raises(SubagentError) as info:
            await SubagentRuntime.of(ctx).start(
                "codex", SubagentStartRequest("please say hello", parent, AbortSignal())
            )
        assert await procs.new_tree_settled(before) == set()
    assert info.value.code == "START_FAILED"
    message = info.value.message
    assert message.startswith("codex initialize failed: codex app-server exited (exit status 1)")
    assert "config.toml" in message  # codex's own words, from its stderr


async def test_a_handshake_error_fails_to_start_naming_the_stage(codex: Any, procs: Any) -> None:
    async with codex.context(model_provider="no-such-provider") as (ctx, parent):
        before = live_children()
        with pytest.raises(SubagentError) as info:
            await SubagentRuntime.of(ctx).start(
                "codex", SubagentStartRequest("please say hello", parent, AbortSignal())
            )
        assert await procs.new_tree_settled(before) == set()
    assert info.value.code == "START_FAILED"
    assert info.value.message.startswith("codex thread-start failed: thread/start: ")
    assert "no-such-provider" in info.value.message


async def test_unknown_server_request_is_answered_with_an_error_and_fails_the_run(
    codex: Any, procs: Any, tmp_path: Any
) -> None:
    relay = Path(__file__).with_name("inject_server_request.py")
    log = tmp_path / "relay" / "answers.jsonl"  # the relay's state: writable in the sandbox
    args = [str(relay), str(log), "item/fromTheFuture/request", codex.bin]
    state = [str(log.parent)]
    async with codex.context(command=sys.executable, args=args, state_dirs=state) as (ctx, parent):
        before = live_children()
        started = time.monotonic()
        run = await SubagentRuntime.of(ctx).start(
            "codex", SubagentStartRequest("hang while asked", parent, AbortSignal())
        )
        with anyio.fail_after(10):
            result = await run.result
        elapsed = time.monotonic() - started
        assert await procs.new_tree_settled(before) == set()
        await run.dispose()
    assert result.stop_reason == "error", result
    assert elapsed < 3.0
    assert result.diagnostic is not None
    assert result.diagnostic.startswith(
        "codex turn failed: codex sent a server request this provider cannot answer:"
        " 'item/fromTheFuture/request'"
    )
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    (answer,) = [e["answer"] for e in entries if "answer" in e]
    assert answer["id"] == "dsh-test-injected-1"
    assert answer["error"]["code"] == -32601
    assert "item/fromTheFuture/request" in answer["error"]["message"]
    # the real codex was told to stop the turn (turn/interrupt), not left running
    assert [e["turn_completed"] for e in entries if "turn_completed" in e] == ["interrupted"]


async def test_a_turn_start_error_settles_error_naming_the_stage(
    codex: Any, procs: Any, tmp_path: Any
) -> None:
    relay = Path(__file__).with_name("inject_server_request.py")
    args = [str(relay), str(tmp_path / "log"), "fail-turn-start", codex.bin]
    async with codex.context(command=sys.executable, args=args) as (ctx, parent):
        before = live_children()
        run = await SubagentRuntime.of(ctx).start(
            "codex", SubagentStartRequest("please say hello", parent, AbortSignal())
        )
        with anyio.fail_after(10):
            result = await run.result
        assert await procs.new_tree_settled(before) == set()
        await run.dispose()
    assert result.stop_reason == "error", result
    assert result.diagnostic is not None
    assert result.diagnostic.startswith(
        "codex turn-start failed: turn/start: injected turn/start failure (code -32600)"
    )
    assert codex.server.requests == []


FAKE = str(Path(__file__).with_name("fake_app_server.py"))


async def test_a_silent_codex_fails_the_start_within_start_timeout(codex: Any, procs: Any) -> None:
    overrides = {"command": sys.executable, "args": [FAKE, "silent"], "start_timeout": 0.5}
    async with codex.context(**overrides) as (ctx, parent):
        before = live_children()
        started = time.monotonic()
        with pytest.raises(SubagentError) as info:
            await SubagentRuntime.of(ctx).start(
                "codex", SubagentStartRequest("please say hello", parent, AbortSignal())
            )
        elapsed = time.monotonic() - started
        assert await procs.new_tree_settled(before) == set()
    assert info.value.code == "START_FAILED"
    assert info.value.message.startswith(
        "codex did not start within start_timeout = 0.5 s (stage: initialize)"
    )
    assert elapsed < 3.0


async def test_a_codex_silent_on_turn_start_settles_error_naming_the_stage(codex: Any) -> None:
    overrides = {"command": sys.executable, "args": [FAKE, "silent-turn"], "start_timeout": 0.5}
    async with codex.context(**overrides) as (ctx, parent):
        result = await delegate(ctx, parent, "please say hello")
    assert result.stop_reason == "error", result
    assert result.diagnostic == (
        "codex turn-start failed: codex did not answer turn/start within 0.5 s"
    )


async def test_codex_exiting_mid_turn_settles_error_with_its_last_words(codex: Any) -> None:
    overrides = {"command": sys.executable, "args": [FAKE, "exit-mid-turn"]}
    async with codex.context(**overrides) as (ctx, parent):
        result = await delegate(ctx, parent, "please say hello")
    assert result.stop_reason == "error", result
    assert result.output == "Half an ans"
    assert result.usage.incomplete  # codex reported no usage
    assert result.diagnostic is not None
    assert result.diagnostic.startswith(
        "codex process failed: codex app-server exited (exit status 3) before the turn completed"
    )
    assert "the fake app-server gave up mid-turn" in result.diagnostic
