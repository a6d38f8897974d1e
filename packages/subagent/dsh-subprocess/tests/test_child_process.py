"""ChildProcess against real child processes: start, teardown, stderr tail, cwd."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

import dsh.subprocess._spawn as spawn_module
from dsh.core import Context, parse_preset
from dsh.subagent import InvalidRequest
from dsh.subprocess import (
    ChildProcess,
    ProcessStartError,
    RunTag,
    StderrTail,
    resolve_child_cwd,
    scrubbed_env,
)
from dsh.testing.processes import alive, live_children, wait_until_gone

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PY = sys.executable

# Spawns a grandchild in its (process) group, then ignores stdin EOF and SIGTERM.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(g.pid, flush=True)
sys.stderr.write("\\x1b[31mAPI_KEY=sk-abcdefghijklmnopqrstu\\x1b[0m leaked? no\\n")
sys.stderr.flush()
while True:
    time.sleep(1)
"""

# Dies only on SIGKILL, and first starts a process in a session of its own that holds
# its stdout and stderr (as agent products start tool commands): issue 10 item 4.
ESCAPER = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
e = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                     start_new_session=True, stdin=subprocess.DEVNULL)
print(e.pid, flush=True)
while True:
    time.sleep(1)
"""


async def start(script: str, **kwargs: object) -> ChildProcess:
    return await ChildProcess.start([PY, "-c", script], env=scrubbed_env(), cwd="/", **kwargs)  # type: ignore[arg-type]


async def gone(pids: list[int], within: float = 10.0) -> float:
    """Waits until ``pids`` are gone, within a generous bound (the machine may be busy)."""
    return await anyio.to_thread.run_sync(wait_until_gone, pids, within)


# -- endings ----------------------------------------------------------------------------


async def test_polite_child_exits_on_eof() -> None:
    child = await start("import sys; sys.stdin.read(); print('bye')")
    assert await child.terminate(eof_grace=5) == "exited"
    assert child.returncode == 0
    assert child.exit_description() == "exit status 0"
    assert child.ending == "exited"


async def test_child_that_exits_on_sigterm() -> None:
    child = await start("import time; print('up', flush=True); time.sleep(60)")
    assert await child.stdout.readline() == b"up\n"
    # stdin EOF is ignored (the child never reads it); SIGTERM's default action ends it
    started = time.monotonic()
    assert await child.terminate(eof_grace=0.2, term_grace=5) == "terminated"
    assert time.monotonic() - started < 2.0
    assert child.exit_description() == "killed by SIGTERM"


async def test_stubborn_child_and_its_grandchild_are_killed_within_the_graces() -> None:
    before = live_children()
    child = await start(STUBBORN)
    grandchild = int(await child.stdout.readline())
    assert grandchild in child.live_group_members()
    started = time.monotonic()
    ending = await child.terminate(eof_grace=0.3, term_grace=0.3)
    elapsed = time.monotonic() - started
    assert ending == "killed"
    assert child.exit_description() == "killed by SIGKILL"
    assert 0.6 <= elapsed < 0.6 + 1.5
    assert not alive(grandchild)
    assert child.live_group_members() == []
    assert live_children() - before == set()
    assert await child.terminate() == "killed"  # idempotent, and immediate
    tail = child.stderr_tail.text()
    assert "sk-abcdefghij" not in tail
    assert "API_KEY=[redacted]" in tail
    assert "\x1b" not in tail
    assert "leaked? no" in tail


async def test_concurrent_terminates_share_one_teardown() -> None:
    child = await start(STUBBORN)
    grandchild = int(await child.stdout.readline())
    started = time.monotonic()
    endings = await asyncio.gather(
        child.terminate(eof_grace=0.2, term_grace=0.2),
        child.terminate(eof_grace=5, term_grace=5),
        child.terminate(),
    )
    assert endings == ["killed", "killed", "killed"]
    assert time.monotonic() - started < 2.0  # the first caller's graces, not 5 + 5
    assert not alive(grandchild)


@pytest.mark.parametrize("how", ["anyio-scope", "task-cancel"])
async def test_cancelled_caller_still_ends_with_nothing_alive(how: str) -> None:
    before = live_children()
    child = await start(STUBBORN)
    grandchild = int(await child.stdout.readline())
    if how == "anyio-scope":
        with anyio.move_on_after(0.05):
            await child.terminate(eof_grace=2, term_grace=2)
    else:
        task = asyncio.get_running_loop().create_task(child.terminate(eof_grace=2, term_grace=2))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    # the cancelled caller killed the tree at once (the graces would take 2 + 2 s); the
    # teardown goes on and is joined
    assert await gone([child.pid, grandchild], within=3.0) < 3.0
    started = time.monotonic()
    assert await child.terminate() == "killed"  # it did not exit on EOF: it was killed
    assert time.monotonic() - started < 3.0
    assert live_children() - before == set()


async def test_a_caller_cancelled_while_the_process_starts_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spawn runs in a worker thread; a caller cancelled (asyncio-style) while it
    runs must not orphan the process the thread started."""
    spawned: list[int] = []
    release = threading.Event()
    real_spawn = spawn_module.popen_child

    def slow_spawn(*args: object) -> subprocess.Popen[bytes]:
        popen = real_spawn(*args)  # type: ignore[arg-type]
        spawned.append(popen.pid)
        release.wait(20)  # held in popen_child until the caller has been cancelled
        return popen

    monkeypatch.setattr(spawn_module, "popen_child", slow_spawn)
    before = live_children()
    task = asyncio.get_running_loop().create_task(
        ChildProcess.start(["sleep", "30"], env=scrubbed_env(), cwd="/")
    )
    with anyio.fail_after(20):
        while not spawned:  # the thread started the process and is still in popen_child
            await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.sleep(0.05)  # the cancellation reaches the caller first
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await gone(spawned)
    assert live_children() - before == set()


async def test_teardown_cannot_hang_on_a_process_holding_the_pipes() -> None:
    """Issue 10 item 4: an agent that dies only on SIGKILL, with a process in a session
    of its own holding its stdout and stderr: terminate() returns within the graces plus
    a few seconds, and the run tag takes the escaped process down."""
    tag = RunTag()
    child = await start(ESCAPER, tag=tag)
    escaped = int(await child.stdout.readline())
    started = time.monotonic()
    with anyio.fail_after(0.4 + 0.4 + 3.0):
        assert await child.terminate(eof_grace=0.4, term_grace=0.4) == "killed"
    assert time.monotonic() - started >= 0.8
    await gone([child.pid, escaped])
    assert tag.pids() == []


async def test_teardown_without_a_tag_still_returns_when_the_pipes_stay_open() -> None:
    """The control case: nobody kills the escaped process (no tag), it keeps our pipes
    open, and terminate() still returns in bounded time (it never waits for EOF)."""
    child = await start(ESCAPER)
    escaped = int(await child.stdout.readline())
    try:
        with anyio.fail_after(0.2 + 0.2 + 3.0):
            assert await child.terminate(eof_grace=0.2, term_grace=0.2) == "killed"
        assert alive(escaped)
    finally:
        os.kill(escaped, 9)
        await gone([escaped])


async def test_kill_tree_is_synchronous_and_terminate_still_completes() -> None:
    tag = RunTag()
    child = await start(STUBBORN, tag=tag)
    grandchild = int(await child.stdout.readline())
    child.kill_tree()
    await gone([child.pid, grandchild])
    assert await child.terminate(eof_grace=5, term_grace=5) == "killed"
    assert tag.pids() == []


# -- start errors -----------------------------------------------------------------------


async def test_a_missing_command_fails_to_start_naming_it() -> None:
    with pytest.raises(ProcessStartError) as info:
        await ChildProcess.start(["/nonexistent/agent"], env={}, cwd="/", what="acp agent")
    assert str(info.value) == (
        "could not start acp agent '/nonexistent/agent': No such file or directory"
    )


async def test_a_non_executable_command_and_a_bad_cwd_fail_to_start(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(ProcessStartError, match=r"agent\.sh': Permission denied"):
        await ChildProcess.start([str(script)], env={}, cwd="/")  # no x bit: not even root
    with pytest.raises(ProcessStartError) as info:
        await ChildProcess.start(["cat"], env=scrubbed_env(), cwd=str(tmp_path / "missing"))
    assert "'cat'" in str(info.value)
    assert str(tmp_path / "missing") in str(info.value)
    with pytest.raises(ProcessStartError, match="empty command"):
        await ChildProcess.start([], env={}, cwd="/")


# -- the stderr tail --------------------------------------------------------------------


async def test_stderr_tail_is_bounded() -> None:
    tail = StderrTail(limit=100)
    for i in range(1000):
        tail.feed(f"line {i}\n".encode())
    text = tail.text()
    assert text.startswith("…")
    assert text.endswith("line 999")
    assert len(tail._buffer) == 100
    assert len(tail.text(max_chars=20)) <= 21


def test_stderr_tail_redacts_before_it_cuts() -> None:
    """A secret cut in half by the size limits must not come out half-visible."""
    secret = "sk-abcdefghijklmnopqrstuvwxyz0123456789"
    tail = StderrTail(limit=1000)
    tail.feed(f"OPENAI_API_KEY={secret}\nok\n".encode())
    text = tail.text(max_chars=len(secret) + 4)  # the cut falls inside the key name
    assert "ghijklmnop" not in text, text
    assert text.endswith("ok")
    # the byte limit drops the oldest bytes: a partial first line goes with them
    tail = StderrTail(limit=30)
    tail.feed(f"token={secret}\nlast words\n".encode())
    text = tail.text()
    assert "qrstuvwxyz" not in text, text
    assert text == "…last words"


def test_stderr_tail_strips_terminal_escapes_and_control_characters() -> None:
    tail = StderrTail()
    tail.feed(
        b"\x1b[1;31merror\x1b[0m: \x1b]0;title\x07boom\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"
        b"\x1b(B\rprogress 50%\rprogress 100%\x08\x00\n"
    )
    text = tail.text()
    assert "\x1b" not in text
    assert "\x00" not in text
    assert "\x08" not in text
    assert "error: boom" in text
    assert "link" in text
    assert "title" not in text
    assert "http://x" not in text


async def test_drain_stderr_keeps_the_last_words_of_a_crashed_child() -> None:
    child = await start(
        "import sys; sys.stderr.write('Traceback: boom\\n' * 3); sys.stderr.flush(); sys.exit(3)"
    )
    assert await child.wait() == 3
    await child.drain_stderr()
    assert child.stderr_tail.text().endswith("Traceback: boom")
    assert await child.terminate() == "exited"
    assert child.exit_description() == "exit status 3"


# -- cwd --------------------------------------------------------------------------------


async def test_child_cwd_resolution(tmp_path: Path) -> None:
    async with Context.open(
        parse_preset('[agent.model]\nadapter = "scripted"\n'), cwd=tmp_path
    ) as ctx:
        parent = ctx.agents.create()
        resolved = os.path.realpath(tmp_path)
        assert resolve_child_cwd(None, parent, provider="acp") == resolved
        assert resolve_child_cwd("/", parent, provider="acp") == "/"
        with pytest.raises(
            InvalidRequest, match="acp provider cwd must be an absolute path, got 'rel'"
        ):
            resolve_child_cwd("rel", parent, provider="acp")
        with pytest.raises(InvalidRequest, match="is not a directory"):
            resolve_child_cwd(str(tmp_path / "missing"), parent, provider="acp")
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o000)
        if os.geteuid() != 0:  # root can enter anything
            with pytest.raises(InvalidRequest, match="cannot be entered"):
                resolve_child_cwd(str(locked), parent, provider="acp")
        parent.session.header.meta.pop("cwd")
        with pytest.raises(
            InvalidRequest, match="no cwd configured and the parent session records none"
        ):
            resolve_child_cwd(None, parent, provider="acp")
