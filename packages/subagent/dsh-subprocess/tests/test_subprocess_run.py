"""SubprocessRun: the kit's RemoteRun with a real process child and a line protocol."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from dsh.core import AbortSignal, Agent, Context, parse_preset
from dsh.subagent import (
    StartAborted,
    StartFailed,
    SubagentResult,
    SubagentRuntime,
    SubagentStartRequest,
)
from dsh.subprocess import TAG_VARIABLE, SubprocessConfig, SubprocessRun
from dsh.subprocess._scan import chain_of
from dsh.testing.processes import alive, live_children, wait_until_gone

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PRESET = parse_preset('[agent.model]\nadapter = "scripted"\n')

# Reports its environment, then answers one line; "crash" makes it die with last words;
# "hang" makes it hang; started with --ignore-sigterm, only SIGKILL ends it.
AGENT = r"""
import json, os, signal, sys, time
if "--ignore-sigterm" in sys.argv:  # before the handshake: no teardown can come earlier
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
keys = ["DSH_DELEGATION_DEPTH", "DSH_MAX_DEPTH", "DSH_PROCESS_TAG", "OPENAI_API_KEY",
        "GITHUB_TOKEN", "FROM_CONFIG", "PATH"]
print(json.dumps({k: os.environ.get(k) for k in keys} | {"cwd": os.getcwd()}), flush=True)
task = sys.stdin.readline().strip()
if task == "crash":
    sys.stderr.write("Traceback (most recent call last):\nRuntimeError: model said no\n")
    sys.exit(1)
if task == "hang":
    while True:
        time.sleep(1)
print(f"answer: {task}", flush=True)
sys.stdin.read()
"""


class LineRun(SubprocessRun):
    """One line out, one line back."""

    def __init__(self, request: SubagentStartRequest, config: SubprocessConfig) -> None:
        super().__init__("line", request, config)
        self.reported: dict[str, str | None] = {}

    async def open(self) -> None:
        child = await self.spawn(hint="is python installed?")
        self.stages.enter("handshake")
        self.reported = json.loads(await child.stdout.readline())
        if self.request.prompt_text == "slow-open":
            await anyio.sleep_forever()

    async def turn(self) -> SubagentResult:
        assert self.child is not None
        self.child.stdin.write(self.request.prompt_text.encode() + b"\n")
        await self.child.stdin.drain()
        line = await self.child.stdout.readline()
        if not line:
            raise ConnectionResetError("the agent closed its stdout")
        return SubagentResult(line.decode().strip(), "completed")


def config(*agent_args: str, **fields: object) -> SubprocessConfig:
    values: dict[str, object] = {"eof_grace": 1, "term_grace": 1, **fields}
    return SubprocessConfig(command=sys.executable, args=["-c", AGENT, *agent_args], **values)  # type: ignore[arg-type]


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[Context]:
    async with Context.open(PRESET, cwd=tmp_path) as ctx:
        yield ctx


@pytest.fixture
def parent(ctx: Context) -> Agent:
    return ctx.agents.create()


@pytest.fixture
async def unsandboxed_parent(tmp_path: Path) -> AsyncIterator[Agent]:
    """A parent whose children run bare (in a sandbox, SIGTERM to bubblewrap ends the
    whole sandbox at once: there is no ladder to follow)."""
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n[sandbox]\nmode = "off"\n')
    async with Context.open(preset, cwd=tmp_path) as ctx:
        yield ctx.agents.create()


def request(parent: Agent, prompt: str, signal: AbortSignal | None = None) -> SubagentStartRequest:
    return SubagentStartRequest(prompt, parent, signal or AbortSignal(), max_depth=None)


async def test_a_run_answers_and_leaves_nothing(
    ctx: Context, parent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-000000000000")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    before = live_children()
    probe = LineRun(
        request(parent, "ping"),
        config(passthrough_env=["OPENAI_API_KEY"], env={"FROM_CONFIG": "1"}),
    )
    run = await probe.launch()
    SubagentRuntime.of(ctx).observe(run, probe.request)
    async with run:
        result = await run.result
    assert result == SubagentResult("answer: ping", "completed")
    env = probe.reported
    assert env["DSH_DELEGATION_DEPTH"] == "1"
    assert env["OPENAI_API_KEY"] == "sk-test-key-000000000000"  # passed through by name
    assert env["GITHUB_TOKEN"] is None  # scrubbed
    assert env["FROM_CONFIG"] == "1"
    assert env["cwd"] == os.path.realpath(tmp_path)  # the parent session's cwd
    assert env[TAG_VARIABLE] is not None
    assert chain_of(f"{TAG_VARIABLE}={env[TAG_VARIABLE]}".encode())[-1] == probe.tag.element  # type: ignore[index]
    assert probe.child is not None
    assert probe.child.ending == "exited"  # it exited on stdin EOF
    assert live_children() - before == set()


async def test_a_crashed_child_fails_with_its_last_words(parent: Agent) -> None:
    probe = LineRun(request(parent, "crash"), config())
    run = await probe.launch()
    async with run:
        result = await run.result
    assert result.stop_reason == "error"
    assert result.diagnostic == (
        "line turn failed: the agent closed its stdout\n"
        "line stderr (last lines):\n"
        "Traceback (most recent call last):\nRuntimeError: model said no"
    )


async def test_a_child_that_dies_only_on_sigkill_is_disposed_within_the_graces(
    unsandboxed_parent: Agent,
) -> None:
    probe = LineRun(
        request(unsandboxed_parent, "hang"),
        config("--ignore-sigterm", turn_timeout=0.3, cancel_grace=0.2, eof_grace=0.3),
    )
    run = await probe.launch()
    started = time.monotonic()
    async with run:
        result = await run.result
    assert result.stop_reason == "error"
    assert "turn_timeout = 0.3 s" in (result.diagnostic or "")
    assert time.monotonic() - started < 0.3 + 0.3 + 1 + 1.5
    assert probe.child is not None
    assert probe.child.ending == "killed"


async def test_a_missing_command_is_a_start_failure_with_the_hint(parent: Agent) -> None:
    probe = LineRun(request(parent, "ping"), SubprocessConfig(command="/nonexistent/agent"))
    with pytest.raises(StartFailed) as info:
        await probe.launch()
    assert str(info.value) == (
        "could not start line child '/nonexistent/agent': No such file or directory;"
        " is python installed?"
    )


async def test_an_aborted_start_kills_the_child_without_waiting_the_eof_grace(
    parent: Agent,
) -> None:
    signal = AbortSignal()
    probe = LineRun(request(parent, "slow-open", signal), config(eof_grace=5, term_grace=5))
    asyncio.get_running_loop().call_later(0.5, signal.abort, "parent gave up")
    started = time.monotonic()
    with pytest.raises(StartAborted, match="parent gave up"):
        await probe.launch()
    assert time.monotonic() - started < 0.5 + 2.0  # not the 5 s EOF grace
    assert probe.child is not None
    assert not alive(probe.child.pid)
    await anyio.to_thread.run_sync(wait_until_gone, [probe.child.pid], 1.0)
