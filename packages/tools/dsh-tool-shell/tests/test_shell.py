"""The shell tool against real processes: output, exit status, cwd, environment, caps,
timeout and cancel (no process left, grandchildren in other sessions included)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Context, ToolContext, ToolResult, parse_preset
from dsh.core.plugins import PluginError
from dsh.subprocess import TERMINAL_EXTENSION
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.processes import cmdline, live_children, process_tree, wait_until_gone
from dsh.tool_shell._run import OutputCapture

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

BASE = '[agent.model]\nadapter = "scripted"\n'


def context_with(cwd: Path, config: str = "") -> AbstractAsyncContextManager[Context]:
    row = '[[plugin]]\nname = "dsh-tool-shell"\n' + (f"config = {{ {config} }}\n" if config else "")
    return Context.open(parse_preset(BASE + row), cwd=cwd)


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[Context]:
    async with context_with(tmp_path) as ctx:
        ctx.permissions.allow_all = True
        yield ctx


async def shell(
    ctx: Context, command: str, *, signal: AbortSignal | None = None, **more: Any
) -> ToolResult:
    ctx.permissions.allow_all = True
    tool = ctx.tools.get("shell")
    assert tool is not None
    agent = ctx.agents.create()
    return await tool.invoke(
        {"command": command, **more}, ToolContext(agent, "call-1", signal or AbortSignal())
    )


def text(result: ToolResult) -> str:
    assert isinstance(result.content, str)
    return result.content


async def gone(pids: set[int], within: float = 15.0) -> None:
    await anyio.to_thread.run_sync(wait_until_gone, pids, within)


# -- the tool -------------------------------------------------------------------------------


async def test_registration(ctx: Context) -> None:
    tool = ctx.tools.get("shell")
    assert tool is not None
    assert tool.permission == "ask"
    assert tool.kind == "execute"
    assert not tool.concurrency_safe
    assert tool.title_for(tool.parse({"command": "ls -la"})) == "Run `ls -la`"
    assert tool.title_for(tool.parse({"command": "cd x\nmake test"})) == (
        "Run `cd x` (+1 more line)"
    )
    # Control characters are shown, never raw: a \r cannot hide the start of the line.
    tricky = tool.title_for(tool.parse({"command": "touch X #\x1b[2K\rRun `ls -la`"}))
    assert tricky == "Run `touch X #\\x1b[2K\\rRun `ls -la``"
    long = tool.title_for(tool.parse({"command": "echo " + "y" * 300}))
    assert len(long) < 140
    assert set(tool.spec.parameters["properties"]) == {"command", "timeout"}


async def test_the_terminal_extension_runs_a_command_in_the_background(
    ctx: Context, tmp_path: Path
) -> None:
    """The seam the acp provider's shared workspace uses (through the registry): the
    tool's shell, cwd and sandbox; the output's tail up to the limit; the tree killed."""
    tool = ctx.tools.get("shell")
    assert tool is not None
    opener = tool.extensions[TERMINAL_EXTENSION]
    tctx = ToolContext(ctx.agents.create(), "t-1", AbortSignal())
    args = tool.parse({"command": "printf 0123456789; echo $EXTRA > extra; exit 4"})
    terminal = await opener(args, tctx, env={"EXTRA": "given"}, output_byte_limit=4)
    assert await terminal.wait() == 4
    assert terminal.output() == ("6789", True)
    assert (terminal.exit_code, terminal.signal) == (4, None)
    assert (tmp_path / "extra").read_text() == "given\n"
    await terminal.release()
    before = live_children()
    sleeper = await opener(tool.parse({"command": "sleep 31.25 & sleep 31.5"}), tctx)
    with anyio.fail_after(10):  # both sleeps started (the one in the background too)
        while True:
            pids = process_tree(live_children() - before)
            if sum(cmdline(pid).startswith("sleep 31.") for pid in pids) == 2:
                break
            await anyio.sleep(0.02)
    assert not sleeper.exited
    await sleeper.kill()
    assert sleeper.exited
    assert sleeper.exit_code is None or sleeper.exit_code > 128  # killed by a signal
    await gone(pids)
    assert sleeper.output() == ("", False)
    await sleeper.release()


async def test_output_and_exit_status(ctx: Context) -> None:
    result = await shell(ctx, "echo out; echo err >&2; printf 'no newline'")
    assert not result.is_error
    assert text(result) == "out\nerr\nno newline\n[exit status 0]"
    assert result.data == {"exit_status": 0, "outcome": "exited", "truncated": False}
    failed = await shell(ctx, "echo failing; exit 3")
    assert failed.is_error
    assert text(failed) == "failing\n[exit status 3]"
    assert failed.data is not None
    assert failed.data["exit_status"] == 3
    silent = await shell(ctx, "true")
    assert text(silent) == "(no output)\n[exit status 0]"
    killed = await shell(ctx, "kill -TERM $$")
    assert killed.is_error
    # inside the sandbox, bubblewrap reports a death by signal N as 128 + N, as sh does
    assert text(killed).endswith("[exit status 143]")


async def test_unsandboxed_death_by_signal_is_named(tmp_path: Path) -> None:
    preset = parse_preset(BASE + '[sandbox]\nmode = "off"\n[[plugin]]\nname = "dsh-tool-shell"\n')
    async with Context.open(preset, cwd=tmp_path) as ctx:
        killed = await shell(ctx, "kill -TERM $$")
    assert killed.is_error
    assert text(killed).endswith("[killed by SIGTERM]")


async def test_runs_in_the_agent_cwd(ctx: Context, tmp_path: Path) -> None:
    assert text(await shell(ctx, "pwd")) == f"{tmp_path}\n[exit status 0]"
    sub = tmp_path / "sub"
    sub.mkdir()
    tool = ctx.tools.get("shell")
    assert tool is not None
    agent = ctx.agents.create(meta={"cwd": str(sub)})
    result = await tool.invoke({"command": "pwd"}, ToolContext(agent, "c", AbortSignal()))
    assert text(result) == f"{sub}\n[exit status 0]"


async def test_configured_cwd_and_shell(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    async with context_with(tmp_path, f'cwd = "{other}", shell = "/bin/bash"') as ctx:
        result = await shell(ctx, 'pwd; echo "$BASH_VERSION" | cut -c1')
        lines = text(result).splitlines()
        assert lines[0] == str(other)
        assert lines[1].isdigit()


async def test_environment_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_TEST_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("DSH_TEST_PASSED", "passed-through")
    command = 'echo "${DSH_TEST_API_KEY:-unset} ${DSH_TEST_PASSED:-unset} ${EXTRA:-unset}"'
    async with context_with(tmp_path) as ctx:
        assert text(await shell(ctx, command)).startswith("unset unset unset\n")
        tagged = text(await shell(ctx, 'echo "${DSH_PROCESS_TAG:-untagged}"'))
        assert not tagged.startswith("untagged")
    config = 'passthrough_env = ["DSH_TEST_PASSED"], env = { EXTRA = "set" }'
    async with context_with(tmp_path, config) as ctx:
        assert text(await shell(ctx, command)).startswith("unset passed-through set\n")


async def test_stdin_is_closed(ctx: Context) -> None:
    started = time.monotonic()
    result = await shell(ctx, "cat; read line || echo eof")
    assert text(result) == "eof\n[exit status 0]"
    assert time.monotonic() - started < 5


async def test_output_is_capped_keeping_both_ends(tmp_path: Path) -> None:
    async with context_with(tmp_path, "max_output_bytes = 1000") as ctx:
        result = await shell(ctx, "echo FIRST; yes line | head -n 20000; echo LAST >&2")
        out = text(result)
        assert out.startswith("FIRST\nline\n")
        assert out.endswith("line\nLAST\n[exit status 0]")
        assert "[truncated: " in out
        assert "bytes of output left out here]" in out
        assert len(out.encode()) < 1200
        assert result.data is not None
        assert result.data["truncated"] is True
        assert not result.is_error


def test_output_capture_cuts_on_character_boundaries() -> None:
    capture = OutputCapture(16)
    capture.feed("ééééé".encode())  # 10 bytes: the head (12 bytes) cuts nothing yet
    capture.feed("ééééé".encode())  # 20 bytes: 12 in the head, 4 in the tail, 4 left out
    shown = capture.text()
    head, marker, tail = shown.split("\n")
    assert head == "éééééé"
    assert tail == "éé"
    assert marker == "[truncated: 4 bytes of output left out here]"
    odd = OutputCapture(16)
    odd.feed(b"a" + "é".encode() * 10)  # 21 bytes: the head cuts an é in two
    head, _marker, tail = odd.text().split("\n")
    assert head == "a" + "é" * 5
    assert "\ufffd" not in head + tail


async def test_a_missing_shell_is_a_clear_error(tmp_path: Path) -> None:
    async with context_with(tmp_path, 'shell = "/nonexistent/sh"') as ctx:
        result = await shell(ctx, "echo hi")
        assert result.is_error
        assert "could not start shell '/nonexistent/sh'" in text(result)


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ("timeout = 700", "larger than max_timeout"),
        ('cwd = "relative"', "cwd must be an absolute path"),
        ('cwd = "/nonexistent/dir"', "is not a directory"),
        ("max_output_bytes = 10", "max_output_bytes"),
        ('passthrough_env = ["A=B"]', "invalid environment variable name"),
        ('tool_name = "has space"', "tool_name"),
        ("sandbox = true", "sandbox"),
    ],
)
async def test_bad_config_fails_the_load(tmp_path: Path, config: str, problem: str) -> None:
    with pytest.raises(PluginError) as caught:
        async with context_with(tmp_path, config):
            pass
    assert 'plugin "dsh-tool-shell"' in str(caught.value)
    assert problem in str(caught.value)


# -- ending: timeout, cancel, background processes ------------------------------------------


async def test_timeout_kills_the_tree(ctx: Context) -> None:
    before = live_children()
    started = time.monotonic()
    result = await shell(ctx, "echo begun; sleep 30 & sleep 31", timeout=0.5)
    elapsed = time.monotonic() - started
    assert elapsed < 5
    assert result.is_error
    out = text(result)
    assert out.startswith("begun\n")
    assert "[timed out after 0.5 s: the command and every process it started were killed" in out
    assert result.data is not None
    assert result.data["outcome"] == "timeout"
    assert_no_new_processes(before, within=3.0)  # a sandbox's inner processes die last


async def test_timeout_argument_is_capped_by_config(tmp_path: Path) -> None:
    async with context_with(tmp_path, "timeout = 0.3, max_timeout = 0.5") as ctx:
        started = time.monotonic()
        result = await shell(ctx, "sleep 30", timeout=1000)
        assert time.monotonic() - started < 5
        assert "[timed out after 0.5 s" in text(result)
        assert "[timed out after 0.3 s" in text(await shell(ctx, "sleep 30"))


async def _wait_for_tree(before: set[int], at_least: int) -> set[int]:
    """The processes the running command started (waits until ``at_least`` exist)."""
    with anyio.fail_after(20):
        while True:
            tree = process_tree(live_children() - before)
            if len(tree) >= at_least:
                return tree
            await anyio.sleep(0.02)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


async def _wait_for_escaped_tree(before: set[int]) -> set[int]:
    """The command's processes, once both sleeps run and the ``setsid`` one has left the
    shell's process group (on a busy machine that can take a while after the shell
    starts: waited for, within a generous bound, never sampled once)."""
    tree: set[int] = set()
    try:
        with anyio.fail_after(20):
            while True:
                tree = process_tree(live_children() - before)
                groups = {_cmdline(pid): _pgid(pid) for pid in tree}
                escaped, stayed = groups.get("sleep 300"), groups.get("sleep 301")
                if escaped is not None and stayed is not None and escaped != stayed:
                    return tree
                await anyio.sleep(0.02)
    except TimeoutError:
        seen = ", ".join(f"{pid} {_cmdline(pid)!r} group {_pgid(pid)}" for pid in sorted(tree))
        raise AssertionError(
            f"the setsid'd sleep never left the shell's group within 20 s: {seen}"
        ) from None


# The shell prints, then starts a sleep in a session of its own (setsid: out of the
# process group, as a daemonizing tool would) and one in its group, then waits.
ESCAPING = "echo started; setsid sleep 300 & sleep 301 & wait"


@pytest.mark.timeout(60)
async def test_cancel_kills_everything_including_setsid_grandchildren(ctx: Context) -> None:
    before = live_children()
    signal = AbortSignal()
    results: list[ToolResult] = []

    async def run() -> None:
        results.append(await shell(ctx, ESCAPING, signal=signal))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run)
        tree = await _wait_for_escaped_tree(before)
        started = time.monotonic()
        signal.abort("the user pressed stop")
    assert time.monotonic() - started < 5  # returned promptly
    await gone(tree)
    assert_no_new_processes(before, within=3.0)  # a sandbox's inner processes die last
    (result,) = results
    assert result.is_error
    assert text(result).startswith("started\n")
    assert text(result).endswith(
        "[cancelled (the user pressed stop): the command and every process it started were killed]"
    )


async def test_cancel_of_the_agent_turn_kills_the_tree(ctx: Context) -> None:
    from dsh.core import ScriptedAdapter, ScriptedReply, ScriptedToolCall
    from dsh.core.models import BoundModel

    before = live_children()
    agent = ctx.agents.create(
        model=BoundModel(
            ScriptedAdapter(
                [
                    ScriptedReply(
                        tool_calls=[ScriptedToolCall(name="shell", arguments={"command": ESCAPING})]
                    ),
                    ScriptedReply(text="done"),
                ]
            )
        )
    )
    agent.followup("run it")
    tree = await _wait_for_tree(before, 3)
    started = time.monotonic()
    agent.cancel("stop everything")
    with anyio.fail_after(5):
        await agent.when_idle()
    assert time.monotonic() - started < 5
    await gone(tree)
    assert_no_new_processes(before, within=3.0)  # a sandbox's inner processes die last
    end = agent.session.events[-1]
    assert end.type == "turn/end"
    assert end.data["stop_reason"] == "aborted"


async def test_an_aborted_signal_starts_nothing(ctx: Context) -> None:
    signal = AbortSignal()
    signal.abort("too late")
    result = await shell(ctx, "touch should-not-exist", signal=signal)
    assert result.is_error
    assert "cancelled (too late)" in text(result)
    assert not os.path.exists(ctx.cwd + "/should-not-exist")


async def test_background_processes_do_not_outlive_the_call(ctx: Context) -> None:
    before = live_children()
    started = time.monotonic()
    result = await shell(ctx, "setsid sleep 300 & sleep 301 & echo left running")
    assert time.monotonic() - started < 5
    assert text(result) == "left running\n[exit status 0]"
    assert_no_new_processes(before, within=3.0)  # a sandbox's inner processes die last
