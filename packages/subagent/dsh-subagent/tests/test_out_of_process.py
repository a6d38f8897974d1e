"""Shared out-of-process helpers, against real child processes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import pytest

from dsh.core import Context, parse_preset
from dsh.subagent import SubagentError, SubagentResult, SubagentRun
from dsh.subagent.out_of_process import (
    ChildProcess,
    Stages,
    StderrTail,
    resolve_child_cwd,
    scrubbed_env,
    settle_from,
)
from dsh.testing.processes import live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

PY = sys.executable

# A child that spawns a grandchild in its group, then ignores stdin EOF and SIGTERM.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("ready", flush=True)
sys.stderr.write("API_KEY=sk-abcdefghijklmnopqrstu leaked? no\\n"); sys.stderr.flush()
while True:
    time.sleep(1)
"""


async def test_stubborn_child_and_grandchild_are_killed_within_the_graces() -> None:
    before = live_children()
    child = await ChildProcess.start([PY, "-c", STUBBORN], env=scrubbed_env(), cwd=os.getcwd())
    assert (await child.stdout.readline()).strip() == b"ready"
    started = time.monotonic()
    ending = await child.terminate(eof_grace=0.2, term_grace=0.3)
    elapsed = time.monotonic() - started
    assert ending == "killed"
    assert child.exit_description() == "killed by SIGKILL"
    assert elapsed < 2.0
    assert child.live_group_members() == []  # nothing left in the group
    assert live_children() - before == set()
    assert "[redacted]" in child.stderr_tail.text()
    assert "sk-abcdefghij" not in child.stderr_tail.text()
    assert await child.terminate() == "killed"  # idempotent


async def test_polite_child_exits_on_eof() -> None:
    child = await ChildProcess.start(
        [PY, "-c", "import sys; sys.stdin.read(); print('bye')"], env=scrubbed_env(), cwd="/"
    )
    assert await child.terminate(eof_grace=5) == "exited"
    assert child.returncode == 0


async def test_child_that_exits_on_sigterm() -> None:
    child = await ChildProcess.start(
        [PY, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        env=scrubbed_env(),
        cwd="/",
    )
    await child.stdout.readline()
    # stdin EOF is ignored (the child never reads it), SIGTERM's default action ends it
    assert await child.terminate(eof_grace=0.1, term_grace=5) == "terminated"
    assert child.exit_description() == "killed by SIGTERM"


async def test_cancelled_caller_still_tears_down() -> None:
    before = live_children()
    child = await ChildProcess.start([PY, "-c", STUBBORN], env=scrubbed_env(), cwd="/")
    await child.stdout.readline()
    with anyio.move_on_after(0.05):
        await child.terminate(eof_grace=0.2, term_grace=0.2)
    assert child.ending == "killed"  # the shielded teardown finished anyway
    assert live_children() - before == set()


async def test_bad_command_fails_to_start_cleanly() -> None:
    with pytest.raises(SubagentError) as info:
        await ChildProcess.start(["/nonexistent/agent"], env={}, cwd="/", what="acp agent")
    assert info.value.code == "START_FAILED"
    assert "could not start acp agent '/nonexistent/agent': No such file or directory" in str(
        info.value
    )


async def test_stderr_tail_is_bounded() -> None:
    tail = StderrTail(limit=100)
    for i in range(1000):
        tail.feed(f"line {i}\n".encode())
    text = tail.text()
    assert text.startswith("…")
    assert text.endswith("line 999")
    assert len(tail._buffer) == 100


def test_scrubbed_env_drops_credentials_and_keeps_basics() -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/root",
        "LC_ALL": "C",
        "OPENAI_API_KEY": "sk-secret",
        "AWS_SECRET_ACCESS_KEY": "x",
        "GITHUB_TOKEN": "ghp",
        "HTTPS_PROXY": "http://user:pw@proxy",
        "CUSTOM": "1",
    }
    env = scrubbed_env({"FAKE_API_KEY": "fake"}, base=base, passthrough=["CUSTOM"])
    assert env == {
        "PATH": "/bin",
        "HOME": "/root",
        "LC_ALL": "C",
        "CUSTOM": "1",
        "FAKE_API_KEY": "fake",
    }
    with pytest.raises(TypeError, match="env value for 'N'"):
        scrubbed_env({"N": 1}, base={})  # type: ignore[dict-item]


async def test_child_cwd_resolution(tmp_path: Path) -> None:
    async with Context.open(
        parse_preset('[agent.model]\nadapter = "scripted"\n'), cwd=tmp_path
    ) as ctx:
        parent = ctx.agents.create()
        resolved = os.path.realpath(tmp_path)
        assert resolve_child_cwd(None, parent, provider="acp") == resolved
        assert resolve_child_cwd("/", parent, provider="acp") == "/"
        with pytest.raises(
            SubagentError, match="acp provider cwd must be an absolute path, got 'rel'"
        ):
            resolve_child_cwd("rel", parent, provider="acp")
        with pytest.raises(SubagentError, match="is not a directory"):
            resolve_child_cwd(str(tmp_path / "missing"), parent, provider="acp")
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o000)
        if os.geteuid() != 0:  # root can enter anything
            with pytest.raises(SubagentError, match="cannot be entered"):
                resolve_child_cwd(str(locked), parent, provider="acp")
        parent.session.header.meta.pop("cwd")
        with pytest.raises(
            SubagentError, match="no cwd configured and the parent session records none"
        ):
            resolve_child_cwd(None, parent, provider="acp")


async def test_settle_from_never_raises_for_failures() -> None:
    async def noop() -> None:
        return None

    async def boom() -> SubagentResult:
        raise ConnectionResetError("peer went away")

    stages = Stages("codex", "initialize")
    run = SubagentRun("r1", provider="codex", dispose=noop)
    await settle_from(run, boom, describe=stages.describe)
    result = await run.result
    assert result.stop_reason == "error"
    assert result.diagnostic == "codex initialize failed: peer went away"

    async def hang() -> SubagentResult:
        await anyio.sleep_forever()
        raise AssertionError

    run2 = SubagentRun("r2", provider="codex", dispose=noop)
    with anyio.move_on_after(0.01):
        await settle_from(run2, hang)
    assert (await run2.result).stop_reason == "aborted"
