"""ProcessTag and ChildProcess(tag=...): descendants in sessions of their own are reached too."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

from dsh.subagent.out_of_process import ChildProcess, ProcessTag, scrubbed_env
from dsh.testing.processes import alive, live_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

PY = sys.executable

# A child that starts a grandchild in a session of its own (as agent products start
# tool commands), reports the grandchild's pid, then idles.
SETSID_GRANDCHILD = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                     start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(g.pid, flush=True)
time.sleep(60)
"""


async def start_tree(tag: ProcessTag | None) -> tuple[ChildProcess, int]:
    child = await ChildProcess.start(
        [PY, "-c", SETSID_GRANDCHILD], env=scrubbed_env(), cwd="/", tag=tag
    )
    grandchild = int(await child.stdout.readline())
    return child, grandchild


def test_tag_rejects_bad_names() -> None:
    with pytest.raises(ValueError, match="without '='"):
        ProcessTag(name="A=B")
    assert ProcessTag().value != ProcessTag().value
    assert ProcessTag("x", name="MY_TAG").env == {"MY_TAG": "x"}


async def test_tag_finds_the_tree_and_terminate_kills_a_grandchild_outside_the_group() -> None:
    before = live_children()
    tag = ProcessTag()
    child, grandchild = await start_tree(tag)
    deadline = time.monotonic() + 2  # a process just past execve may still show no environ
    while sorted(tag.pids()) != sorted([child.pid, grandchild]):
        assert time.monotonic() < deadline, (tag.pids(), child.pid, grandchild)
        await asyncio.sleep(0.01)
    assert grandchild not in child.live_group_members()  # its own session: killpg misses it
    await child.terminate(eof_grace=0, term_grace=0.2)
    deadline = time.monotonic() + 1
    while alive(grandchild) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert not alive(grandchild)
    assert tag.pids() == []
    assert tag.sweep() == 0  # nothing left to kill
    assert live_children() - before == set()


async def test_without_a_tag_the_grandchild_in_its_own_session_survives_the_group_kill() -> None:
    """The reason for tags: the control case, cleaned up by hand."""
    child, grandchild = await start_tree(None)
    try:
        await child.terminate(eof_grace=0, term_grace=0.2)
        await asyncio.sleep(0.1)
        assert alive(grandchild)
    finally:
        os.kill(grandchild, 9)


async def test_kill_tree_is_synchronous_and_an_interrupted_terminate_can_be_redone() -> None:
    tag = ProcessTag()
    # ignores SIGTERM, so terminate() sits in its grace period when we interrupt it
    child = await ChildProcess.start(
        [
            PY,
            "-c",
            "import signal, time; signal.signal(15, signal.SIG_IGN); print(1, flush=True);"
            " time.sleep(60)",
        ],
        env=scrubbed_env(),
        cwd="/",
        tag=tag,
    )
    await child.stdout.readline()
    task = asyncio.get_running_loop().create_task(child.terminate(eof_grace=0, term_grace=5))
    await asyncio.sleep(0.1)
    task.cancel()  # a raw asyncio cancel: the anyio shield does not stop it
    with pytest.raises(asyncio.CancelledError):
        await task
    assert alive(child.pid)
    child.kill_tree()
    assert tag.pids() == []
    deadline = time.monotonic() + 2
    while child.returncode is None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # the event loop's child watcher reaps it
    # the teardown starts afresh instead of re-raising the old cancellation
    assert await child.terminate(eof_grace=0, term_grace=0.1) == "exited"
