"""The claude-code provider with the real bundled Claude Code CLI, offline, against the
fake Messages API. Only the model is replaced.

Prompts carry unique markers (``DSH-...``): the CLI puts a long system reminder
before the user's words and the fake server matches anywhere in the user text.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query
from pydantic import ValidationError

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import (
    SubagentError,
    SubagentResult,
    SubagentRun,
    SubagentRuntime,
    SubagentStartRequest,
    ToolFilter,
)
from dsh.subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider
from dsh.subagent_claude_code._command import cli_argv, env_defaults
from dsh.subagent_claude_code._run import DENIAL_MESSAGE
from dsh.subagent_claude_code._transport import CLITransport
from dsh.subprocess import WATCHDOG_MARK, ChildProcess, RunTag, scrubbed_env
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.model_servers import HTTPError, MessagesReply, StreamFaults, ToolUse
from dsh.testing.model_servers.anthropic_messages import (
    reply_with_tool_result,
    tool_results,
    user_text,
)
from dsh.testing.processes import cmdline, descendants, live_children, wait_until_gone

if TYPE_CHECKING:
    from conftest import Setup

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

SCRIPTED_PARENT = '[agent.model]\nadapter = "scripted"\n'

# Two processes that run until killed, started by the Bash tool in a session of its
# own (the CLI refuses long `sleep`s).
BLOCKING_TOOL = "tail -f /dev/null & tail -f /dev/null"


def bash(command: str) -> MessagesReply:
    return MessagesReply(tool_uses=[ToolUse("Bash", {"command": command, "description": "probe"})])


async def delegate(setup: Setup, prompt: str, signal: AbortSignal | None = None) -> SubagentResult:
    run = await setup.runtime.start(
        setup.provider.name, SubagentStartRequest(prompt, setup.parent, signal or AbortSignal())
    )
    async with run:
        with anyio.fail_after(60):
            return await run.result


def tool_result_text(setup: Setup, marker: str) -> tuple[str, bool]:
    """The text and is_error of the tool result the model received for ``marker``'s run."""
    (request,) = [r for r in setup.server.matching(marker) if tool_results(r)]
    (result,) = tool_results(request)
    content = result["content"]
    text = content if isinstance(content, str) else "".join(c.get("text", "") for c in content)
    return text, bool(result.get("is_error"))


async def start_blocking_tool(
    setup: Setup, marker: str
) -> tuple[SubagentRun, AbortSignal, set[int]]:
    """Start a run whose Bash tool blocks; returns it once the tool's processes run,
    with the CLI's whole process tree."""
    setup.server.when(marker, bash(BLOCKING_TOOL), "unreachable")
    before = live_children()
    signal = AbortSignal()
    run = await setup.runtime.start(
        setup.provider.name, SubagentStartRequest(marker, setup.parent, signal)
    )
    tree = await wait_for_blocking_tool(live_children() - before, lambda: run.settled)
    return run, signal, tree


async def wait_for_blocking_tool(roots: set[int], ended: Any) -> set[int]:
    """The process tree under ``roots`` once both ``tail`` processes run."""
    with anyio.fail_after(30):
        while True:
            tree = roots | {p for pid in roots for p in descendants(pid)}
            if sum(cmdline(p).startswith("tail -f") for p in tree) == 2:
                return tree
            assert not ended(), "the run ended before its tool started"
            await anyio.sleep(0.02)


def _sessions(pids: set[int]) -> set[int]:
    return {os.getsid(pid) for pid in pids if cmdline(pid)}


# -- completing ------------------------------------------------------------------------


async def test_completes_a_delegated_task_with_usage_and_cost(setup: Setup) -> None:
    setup.server.when(
        "DSH-HELLO",
        MessagesReply(text="The answer is 42.", usage={"input_tokens": 120, "output_tokens": 7}),
    )
    result = await delegate(setup, "DSH-HELLO: what is the answer?")
    assert result.stop_reason == "completed", result
    assert result.output == "The answer is 42."
    assert result.diagnostic is None
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) == (120, 7, 0)
    assert usage.cost_usd is not None
    assert usage.cost_usd > 0
    assert not usage.incomplete
    (request,) = setup.server.requests
    assert request.url_path == "/v1/messages"
    assert request.json["stream"] is True
    assert request.json["model"] == "claude-sonnet-4-5"
    assert request.header("x-api-key") == "fake-key"  # from the config's env, not ours
    assert "DSH-HELLO: what is the answer?" in user_text(request)


@pytest.mark.parametrize(
    "config_fields", [{"allowed_tools": ["Bash"], "env": {"DSH_VISIBLE": "yes"}}]
)
async def test_tool_round_trip_in_the_parents_cwd_with_a_scrubbed_env(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_TEST_SECRET_TOKEN", "s3cr3t-value")
    setup.server.when(
        "DSH-TOOL",
        bash("touch made_by_child.txt && pwd && env"),
        reply_with_tool_result("Tool said: {output}"),
    )
    result = await delegate(setup, "DSH-TOOL: look around")
    assert result.stop_reason == "completed", result
    assert result.output.startswith(f"Tool said: {setup.workdir}\n")
    assert (setup.workdir / "made_by_child.txt").exists()
    assert len(setup.server.matching("DSH-TOOL")) == 2  # two model turns
    output, is_error = tool_result_text(setup, "DSH-TOOL")  # the next request carried it
    assert not is_error
    lines = output.splitlines()
    assert lines[0] == str(setup.workdir)
    assert "DSH_VISIBLE=yes" in lines  # the config's env reaches the tool
    assert any(line.startswith("DSH_PROCESS_TAG=") for line in lines)  # the run's tag too
    assert "s3cr3t-value" not in output  # ours does not


# -- permissions -----------------------------------------------------------------------


@pytest.mark.parametrize("config_fields", [{"permission_mode": "default"}])
async def test_in_a_mode_that_asks_the_callback_denies_and_the_run_answers(setup: Setup) -> None:
    setup.server.when(
        "DSH-ASK", bash("touch asked.txt"), reply_with_tool_result("Could not: {output}")
    )
    result = await delegate(setup, "DSH-ASK: create a file")
    assert result.stop_reason == "completed", result
    assert not (setup.workdir / "asked.txt").exists()
    output, is_error = tool_result_text(setup, "DSH-ASK")
    assert is_error
    assert output.startswith(f"{DENIAL_MESSAGE} to use Bash")
    assert result.diagnostic is not None
    assert "(permission_mode default): Bash" in result.diagnostic


def cli_processes(tree: set[int]) -> set[int]:
    """The CLI processes in ``tree`` (not the bubblewrap around one: its command line
    holds the CLI's too)."""
    return {
        p
        for p in tree
        if "--output-format stream-json" in cmdline(p)
        and os.path.basename(cmdline(p).split(" ", 1)[0]) != "bwrap"
    }


# -- cancellation ------------------------------------------------------------------------


@pytest.mark.parametrize("config_fields", [{"allowed_tools": ["Bash"]}])
async def test_cancel_mid_tool_interrupts_and_takes_the_whole_process_tree_down_within_a_second(
    setup: Setup,
) -> None:
    run, signal, tree = await start_blocking_tool(setup, "DSH-CANCEL")
    cli = cli_processes(tree)
    assert len(cli) == 1
    assert len(_sessions(tree)) >= 2  # the tool runs in a session of its own
    started = time.monotonic()
    signal.abort("parent cancelled")
    gone = await anyio.to_thread.run_sync(wait_until_gone, tree, 1.0)
    with anyio.fail_after(1.0):
        result = await run.result
    settled = time.monotonic() - started
    await run.dispose()
    assert gone <= 1.0
    assert settled <= 1.0
    assert result.stop_reason == "aborted"
    assert result.diagnostic == "parent cancelled"  # the CLI confirmed the interrupt
    # the interrupted CLI still reported what the run used
    assert result.usage.input_tokens > 0
    assert result.usage.cost_usd is not None
    assert result.usage.cost_usd > 0
    assert not result.usage.incomplete


@pytest.mark.parametrize("config_fields", [{"allowed_tools": ["Bash"]}])
async def test_a_second_cancel_during_teardown_leaks_nothing(setup: Setup) -> None:
    run, signal, tree = await start_blocking_tool(setup, "DSH-TWICE")
    loop = asyncio.get_running_loop()
    signal.abort("first cancel")
    await asyncio.sleep(0.02)  # interrupt sent, teardown under way
    disposers = [loop.create_task(run.dispose()) for _ in range(2)]
    await asyncio.sleep(0.01)
    for disposer in disposers:
        disposer.cancel()  # raw asyncio cancels: an anyio shield does not stop them
    gone = await anyio.to_thread.run_sync(wait_until_gone, tree, 1.0)
    assert gone <= 1.0
    for disposer in disposers:
        with contextlib.suppress(asyncio.CancelledError):
            await disposer
    assert (await run.result).stop_reason == "aborted"


@pytest.mark.parametrize("config_fields", [{"allowed_tools": ["Bash"]}])
async def test_closing_the_parents_context_mid_tool_leaves_nothing(cli: str, setup: Setup) -> None:
    """The context cancels the task driving the run (twice: it is closing); the
    teardown still takes the whole tree down, and the run settles aborted."""
    setup.server.when("DSH-CLOSE", bash(BLOCKING_TOOL), "unreachable")
    before = live_children()
    async with Context.open(parse_preset(SCRIPTED_PARENT), cwd=setup.workdir) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(ClaudeCodeProvider(setup.provider.config))
        request = SubagentStartRequest("DSH-CLOSE", ctx.agents.create(), AbortSignal())
        run = await runtime.start(setup.provider.name, request)
        tree = await wait_for_blocking_tool(live_children() - before, lambda: run.settled)
    gone = await anyio.to_thread.run_sync(wait_until_gone, tree, 1.0)
    assert gone <= 1.0
    with anyio.fail_after(1.0):
        assert (await run.result).stop_reason == "aborted"
    await run.dispose()


@pytest.mark.parametrize("config_fields", [{"allowed_tools": ["Bash"]}])
async def test_the_transport_lets_a_bare_query_be_interrupted_mid_tool(
    setup: Setup, cli: str
) -> None:
    """Our Transport under the SDK's own ``query()``: the interrupt control request
    ends the turn with the CLI's ``error_during_execution`` result."""
    setup.server.when("DSH-RAW", bash(BLOCKING_TOOL), "unreachable")
    config = setup.provider.config
    env = scrubbed_env({**env_defaults(), **config.env})
    child = await ChildProcess.start(
        cli_argv(config, cli), env=env, cwd=str(setup.workdir), tag=RunTag()
    )
    transport = CLITransport(child)
    results: list[ResultMessage] = []

    async def consume() -> None:
        options = ClaudeAgentOptions(env=env)
        async for message in query(prompt="DSH-RAW", options=options, transport=transport):
            if isinstance(message, ResultMessage):
                results.append(message)
                return

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            tree = await wait_for_blocking_tool({child.pid}, lambda: bool(results))
            assert await transport.interrupt()
        (result,) = results
        assert result.subtype == "error_during_execution"
        assert result.terminal_reason == "aborted_tools"
    finally:
        await child.terminate(eof_grace=0, term_grace=0.3)
    gone = await anyio.to_thread.run_sync(wait_until_gone, tree, 1.0)
    assert gone <= 1.0
    assert not await transport.interrupt()  # nothing left to ask


# A parent process that delegates, prints the run id, then waits for the result.
PARENT = """
import asyncio, sys
from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.subagent_claude_code import ClaudeCodeConfig, ClaudeCodeProvider

async def main():
    config = ClaudeCodeConfig.model_validate_json(sys.argv[1])
    preset = parse_preset('[agent.model]\\nadapter = "scripted"\\n')
    async with Context.open(preset, cwd=sys.argv[2]) as ctx:
        runtime = SubagentRuntime.of(ctx)
        runtime.register_provider(ClaudeCodeProvider(config))
        request = SubagentStartRequest("DSH-ORPHAN", ctx.agents.create(), AbortSignal())
        run = await runtime.start("claude-code", request)
        print(run.id, flush=True)
        await run.result

asyncio.run(main())
"""


@pytest.mark.parametrize("config_fields", [{"allowed_tools": ["Bash"]}])
async def test_when_the_parent_process_is_killed_outright_the_cli_and_its_tools_die_with_it(
    setup: Setup,
) -> None:
    """The watchdog of the killed parent kills the CLI's group and every process
    carrying the run's tag: the tool commands too (sessions of their own)."""
    setup.server.when("DSH-ORPHAN", bash(BLOCKING_TOOL), "unreachable")
    tree: set[int] = set()
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PARENT,
        setup.provider.config.model_dump_json(),
        str(setup.workdir),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None
        with anyio.fail_after(30):
            await parent.stdout.readline()
        tree = await wait_for_blocking_tool({parent.pid}, lambda: parent.returncode is not None)
        (cli,) = cli_processes(tree)
        tools = {p for p in tree if cmdline(p).startswith("tail -f")}
        parent.kill()
        await parent.wait()
        assert any(WATCHDOG_MARK in cmdline(p) for p in tree)  # the parent's own watchdog
        gone = await anyio.to_thread.run_sync(wait_until_gone, {cli, *tools}, 2.0)
        assert gone <= 2.0
        await anyio.to_thread.run_sync(wait_until_gone, tree, 5.0)  # the watchdog exits too
    finally:
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if parent.returncode is None:
            parent.kill()
            await parent.wait()


# -- other failures ----------------------------------------------------------------------


async def test_http_500_settles_error_fast_with_the_status_and_no_retry_storm(
    setup: Setup,
) -> None:
    setup.server.when("DSH-500", HTTPError(500, "fake internal server error"))
    started = time.monotonic()
    result = await delegate(setup, "DSH-500: do it")
    elapsed = time.monotonic() - started
    assert result.stop_reason == "error", result
    assert elapsed < 15
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("claude-code: model API error (HTTP 500): ")
    assert "fake internal server error" in result.diagnostic
    await anyio.sleep(0.5)
    assert len(setup.server.matching("DSH-500")) == 1


@pytest.mark.parametrize("config_fields", [{"allowed_tools": ["Bash"], "max_turns": 1}])
async def test_max_turns_settles_error_naming_the_limit(setup: Setup) -> None:
    setup.server.when("DSH-TURNS", bash("echo one"), "never reached")
    result = await delegate(setup, "DSH-TURNS")
    assert result.stop_reason == "error"
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("claude-code: Claude Code stopped at max_turns (1)")


async def test_an_empty_answer_is_an_error(setup: Setup) -> None:
    setup.server.when("DSH-EMPTY", MessagesReply(text=""))
    result = await delegate(setup, "DSH-EMPTY")
    assert result.stop_reason == "error"
    assert result.diagnostic == "claude-code: Claude Code finished with an empty result"


@pytest.mark.parametrize("config_fields", [{"turn_timeout": 2}])
async def test_a_stalled_stream_hits_the_turn_timeout(setup: Setup) -> None:
    setup.server.when(
        "DSH-STALL", MessagesReply(text="so far so", faults=StreamFaults(hang_after=4))
    )
    before = live_children()
    started = time.monotonic()
    result = await delegate(setup, "DSH-STALL")
    # ended by the turn timeout (its diagnostic below), not by a hang: the upper bound
    # only has to be far below the pytest timeout (a loaded machine starts slowly)
    assert 2 <= time.monotonic() - started < 45
    assert result.stop_reason == "error"
    assert result.diagnostic is not None
    assert result.diagnostic.startswith(
        "claude-code turn failed: no answer within turn_timeout = 2 s"
    )
    assert result.output == "so"  # the text streamed before the stall
    # a sandbox's processes end with it, a moment after its bubblewrap is reaped
    assert_no_new_processes(before, within=2.0)
    assert setup.server.matching("DSH-STALL")[0].client_disconnected


@pytest.mark.parametrize("config_fields", [{"model": "claude-fake-1"}])
async def test_a_crashed_cli_is_reported_with_its_exit_and_stderr_tail(setup: Setup) -> None:
    # An unknown model name makes the CLI note it on stderr; then it is killed mid-stream.
    setup.server.when("DSH-CRASH", MessagesReply(text="so far", faults=StreamFaults(hang_after=3)))
    before = live_children()
    run = await setup.runtime.start(
        setup.provider.name, SubagentStartRequest("DSH-CRASH", setup.parent, AbortSignal())
    )
    async with run:
        with anyio.fail_after(30):
            while not setup.server.matching("DSH-CRASH"):
                await anyio.sleep(0.02)
        (cli,) = live_children() - before
        os.kill(cli, signal.SIGKILL)
        with anyio.fail_after(10):
            result = await run.result
    assert result.stop_reason == "error"
    assert result.diagnostic is not None
    assert result.diagnostic.startswith(
        "claude-code: the Claude Code CLI ended (killed by SIGKILL) before sending a result"
    )
    assert "\nclaude-code stderr (last lines):\n[claude-code:unrecognized_model]" in (
        result.diagnostic
    )


# -- refused before any process ---------------------------------------------------------


@pytest.mark.parametrize(
    ("capability", "fields"),
    [
        ("output_schema", {"output_schema": {"type": "object"}}),
        ("depth_limit", {"max_depth": 2}),
        ("tool_filter", {"tool_filter": ToolFilter(allow=("read",))}),
        ("persona", {"persona": "You are terse."}),
    ],
)
async def test_optional_fields_are_refused_before_any_process_starts(
    setup: Setup, capability: str, fields: dict[str, Any]
) -> None:
    before = live_children()
    request = SubagentStartRequest("DSH-NEVER", setup.parent, AbortSignal(), **fields)
    with pytest.raises(SubagentError) as through_runtime:
        await setup.runtime.start("claude-code", request)
    with pytest.raises(SubagentError) as direct:
        await setup.provider.start(request)  # the provider checks too
    for info in (through_runtime, direct):
        assert info.value.code == "UNSUPPORTED_CAPABILITY"
        assert str(info.value) == (
            f'subagent provider "claude-code" does not support the "{capability}" capability'
        )
    assert live_children() == before
    assert setup.server.requests == []


async def test_bad_requests_and_configs_fail_loud_without_a_process(
    setup: Setup, tmp_path: Path
) -> None:
    before = live_children()
    with pytest.raises(SubagentError, match="the prompt has no text") as blank:
        await setup.provider.start(SubagentStartRequest("  ", setup.parent, AbortSignal()))
    assert blank.value.code == "INVALID_REQUEST"
    not_executable = tmp_path / "claude"
    not_executable.write_text("")
    broken = ClaudeCodeProvider(ClaudeCodeConfig(command=str(not_executable)))
    with pytest.raises(SubagentError, match="could not start Claude Code CLI") as missing:
        await broken.start(SubagentStartRequest("x", setup.parent, AbortSignal()))
    assert missing.value.code == "START_FAILED"
    assert "set command to a claude executable" in str(missing.value)
    with pytest.raises(ValidationError, match="absolute path or a name looked up on PATH"):
        ClaudeCodeConfig(command="bin/claude")
    with pytest.raises(ValidationError, match="permission_mode"):
        ClaudeCodeConfig(permission_mode="yolo")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="args must not set --output-format"):
        ClaudeCodeConfig(args=["--output-format=json"])
    with pytest.raises(ValidationError, match="run_timeout was renamed turn_timeout"):
        ClaudeCodeConfig(run_timeout=60)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="cli_path was renamed command"):
        ClaudeCodeConfig(cli_path="/usr/bin/claude")  # type: ignore[call-arg]
    assert ClaudeCodeConfig().turn_timeout == 900
    assert ClaudeCodeConfig(command="claude").command == "claude"  # looked up on PATH
    assert live_children() == before
