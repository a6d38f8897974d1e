"""The watchdog: no child outlives its dsh process, however that process dies; trees a
crashed dsh process left behind are swept when the next one starts its watchdog."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.subprocess import TAG_VARIABLE, ChildProcess, RunTag, scrubbed_env, watchdog
from dsh.subprocess._supervisor import Watchdog
from dsh.testing.processes import alive, wait_until_gone

pytestmark = pytest.mark.timeout(30)

PY = sys.executable
OWNER = str(Path(__file__).with_name("_tree_owner.py"))


class Owner:
    """A dsh process (``_tree_owner.py``) started by the test."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [PY, OWNER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=os.environ
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"{OWNER} {args} printed nothing (exit {self.process.wait()})"
        self.info: dict[str, Any] = json.loads(line)

    @property
    def watchdog(self) -> int:
        pid = self.info["watchdog"]
        assert isinstance(pid, int)
        return pid

    @property
    def pids(self) -> list[int]:
        return list(self.info.get("pids", []))

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def owners() -> Iterator[list[Owner]]:
    started: list[Owner] = []
    yield started
    leftovers: list[int] = []
    for owner in started:
        owner.close()
        leftovers += [*owner.pids, owner.watchdog]
    # An owner's watchdog outlives it by its last sweep (milliseconds): wait for it, or
    # the leftover-process check sees it re-parented to this subreaper.
    with contextlib.suppress(AssertionError):
        wait_until_gone([owner.watchdog for owner in started], within=5.0)
    for pid in leftovers:  # a failed test must not leave its tree behind
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def orphan(tag: str) -> subprocess.Popen[bytes]:
    """A process carrying ``tag``, in a session of its own (as a crashed dsh left it)."""
    return subprocess.Popen(
        ["sleep", "60"],
        env={"PATH": os.environ["PATH"], TAG_VARIABLE: tag},
        start_new_session=True,
    )


def _wait_for_tag(pid: int, within: float = 10.0) -> None:
    """Until ``pid``'s environment shows a tag (a process just started may not have
    reached execve yet): waited for, never sampled once."""
    deadline = time.monotonic() + within
    while TAG_VARIABLE.encode() + b"=" not in Path(f"/proc/{pid}/environ").read_bytes():
        assert time.monotonic() < deadline, f"{pid} shows no {TAG_VARIABLE} after {within} s"
        time.sleep(0.01)


def test_parent_sigkill_takes_every_descendant_down_within_2_s(owners: list[Owner]) -> None:
    owner = Owner()
    owners.append(owner)
    tree = owner.pids
    assert len(tree) == 4  # two children, a grandchild in the group, one in its own session
    assert all(alive(pid) for pid in [*tree, owner.watchdog])
    owner.kill()
    took = wait_until_gone([*tree, owner.watchdog], within=2.0)
    assert took < 2.0


def test_startup_sweep_takes_down_a_tree_whose_owner_and_watchdog_died(
    owners: list[Owner],
) -> None:
    """The watchdog itself is SIGKILLed first, then its dsh process: the tree survives
    both (nobody is watching), until the next dsh process starts its watchdog."""
    owner = Owner("--all-tagged")
    owners.append(owner)
    tree = owner.pids
    assert len(tree) == 3
    os.kill(owner.watchdog, signal.SIGKILL)
    wait_until_gone([owner.watchdog], within=10.0)
    owner.kill()
    # The tree is orphaned now: nothing watches it. (No "still alive" check here: any
    # dsh process starting its watchdog on this machine meanwhile sweeps it, rightly.)
    started = time.monotonic()
    sweeper = Owner("--idle")
    owners.append(sweeper)
    wait_until_gone(tree, within=10.0)  # the sweep at its start, not a later one
    assert time.monotonic() - started < 10.0
    sweeper.close()  # a clean exit takes its watchdog along
    wait_until_gone([sweeper.watchdog], within=10.0)


def test_startup_sweep_judges_owners_by_pid_and_start_time(owners: list[Owner]) -> None:
    """Crafted tags: an owner whose pid runs but started at another time is dead (a
    reused pid); an element of a dead owner anywhere in the chain dooms the process; a
    live owner's tree is left alone."""
    me = os.getpid()
    live_owner = watchdog().owner
    dead_reused_pid = orphan(f"{me}.1/x-1")
    dead_nested = orphan(f"{live_owner}/run-1:999999999.5/y-2")
    living = orphan(f"{live_owner}/run-2")
    processes = [dead_reused_pid, dead_nested, living]
    try:
        for process in processes:  # past execve: the environment shows the tag
            _wait_for_tag(process.pid)
        sweeper = Owner("--idle")
        owners.append(sweeper)
        wait_until_gone([dead_reused_pid.pid, dead_nested.pid], within=10.0)
        assert alive(living.pid)
    finally:
        for process in processes:
            process.kill()
            process.wait()


@pytest.mark.anyio
async def test_a_watchdog_started_again_knows_the_groups_of_the_one_that_died() -> None:
    """Someone SIGKILLs this process's watchdog; the next start brings up a new one, which
    must also guard the children registered with the old one (their groups)."""
    dog = watchdog()
    first = await ChildProcess.start(["sleep", "30"], env=scrubbed_env(), cwd="/")
    old = dog.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    await anyio.to_thread.run_sync(wait_until_gone, [old], 10.0)
    second = await ChildProcess.start(["sleep", "30"], env=scrubbed_env(), cwd="/")
    new = dog.pid
    assert new is not None
    assert new != old
    try:
        dog.close()  # as at exit: the watchdog kills every group it knows
        await anyio.to_thread.run_sync(wait_until_gone, [first.pid, second.pid, new], 10.0)
    finally:
        for child in (first, second):
            child.kill_tree()
            await child.terminate(eof_grace=0, term_grace=0)


@pytest.mark.anyio
async def test_sweep_later_without_a_watchdog_sweeps_in_a_thread() -> None:
    tag = RunTag()
    child = await ChildProcess.start(
        [PY, "-c", "import time; print(1, flush=True); time.sleep(60)"],
        env=scrubbed_env(),
        cwd="/",
        tag=tag,
    )
    await child.stdout.readline()
    Watchdog().sweep_later(tag.element)  # a client whose watchdog never started
    await anyio.to_thread.run_sync(wait_until_gone, [child.pid], 10.0)
    assert await child.terminate() == "exited"
