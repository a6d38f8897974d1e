"""start_pooled_process: spawn, connect, handshake; a failed start stops the process and
says why (with its stderr tail); a command that cannot start says how to fix it."""

from __future__ import annotations

import os
import sys

import anyio
import pytest

from dsh.subagent import StartFailed
from dsh.subprocess import PooledProcess, Starting, scrubbed_env, start_pooled_process

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

# says hello on stdout, complains on stderr, then waits for stdin to end
CHILD = """
import sys
sys.stderr.write("loading the model failed: no weights\\n"); sys.stderr.flush()
print("hello", flush=True)
sys.stdin.read()
"""


class Greeted(PooledProcess):
    greeting = b""

    async def hello(self, fail: str | None = None) -> None:
        self.greeting = await self.child.stdout.readline()
        if fail == "error":
            raise ValueError("the handshake went wrong")
        if fail == "start-failed":
            raise StartFailed("the agent does not speak our version")
        if fail == "hang":
            await anyio.sleep(60)


async def start(
    fail: str | None = None, argv: list[str] | None = None, starting: Starting | None = None
) -> Greeted:
    starting = starting or Starting()
    process = await start_pooled_process(
        starting,
        argv or [sys.executable, "-c", CHILD],
        provider="prov",
        what="prov agent",
        env=scrubbed_env(),
        cwd=os.getcwd(),
        sandbox=None,
        connect=Greeted,
        handshake=lambda process: process.hello(fail),
        describe=lambda process, error: f"prov initialize failed: {error} ({process.pid})",
        term_grace=2.0,
        hint="install prov",
    )
    assert starting.child is process.child
    return process


async def test_a_started_process_is_connected_handshaken_and_tracked() -> None:
    process = await start()
    try:
        assert process.greeting == b"hello\n"
        assert process.alive
    finally:
        await process.aclose(eof_grace=2.0, term_grace=2.0)


@pytest.mark.parametrize("fail", ["error", "start-failed"])
async def test_a_failed_handshake_stops_the_process_and_says_why_with_its_stderr(
    fail: str,
) -> None:
    with pytest.raises(StartFailed) as failed:
        await start(fail)
    message = failed.value.message
    if fail == "error":
        assert message.startswith("prov initialize failed: the handshake went wrong (")
    else:
        assert message.startswith("the agent does not speak our version\n")
    assert "\nprov stderr (last lines):\nloading the model failed: no weights" in message
    assert isinstance(failed.value.__cause__, ValueError | StartFailed)
    pid = int(message.split("(")[1].split(")")[0]) if fail == "error" else None
    if pid is not None:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # stopped and reaped


async def test_a_cancelled_handshake_stops_the_process() -> None:
    starting = Starting()
    with anyio.move_on_after(3):
        await start("hang", starting=starting)
    assert starting.child is not None
    assert starting.child.returncode is not None


async def test_a_command_that_cannot_start_says_how_to_fix_it() -> None:
    with pytest.raises(StartFailed) as failed:
        await start(argv=["/nonexistent/prov-agent"])
    assert failed.value.message.endswith("; install prov")
    assert "/nonexistent/prov-agent" in failed.value.message
