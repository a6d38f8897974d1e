"""RunTag chains: a run's sweep reaches every descendant, in any session, at any depth."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import anyio
import pytest

from dsh.subprocess import TAG_VARIABLE, ChildProcess, RunTag, scrubbed_env, watchdog
from dsh.subprocess._scan import chain_of
from dsh.testing.processes import alive, live_children, wait_until_gone

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PY = sys.executable

# Starts a grandchild in a session of its own (as agent products start tool
# commands), reports its pid, then idles.
SETSID_GRANDCHILD = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                     start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(g.pid, flush=True)
time.sleep(60)
"""

# A dsh process one level down (a `dsh acp` child, say): it starts its own child through
# ChildProcess with a RunTag of its own (tag=True) or with none (tag=False), in a scrubbed
# environment, and reports what it started.
NESTED = """
import asyncio, json, sys
from dsh.subprocess import ChildProcess, RunTag, scrubbed_env, watchdog

async def main() -> None:
    tag = RunTag() if sys.argv[1] == "tag" else None
    g = await ChildProcess.start(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env=scrubbed_env(), cwd="/", tag=tag,
    )
    print(json.dumps({"grandchild": g.pid, "watchdog": watchdog().pid,
                      "element": tag.element if tag else None}), flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def environ_chain(pid: int, within: float = 10.0) -> list[str] | None:
    """The tag chain in ``pid``'s environment, waited for: a process just past
    ``execve`` shows an empty environ for a moment (longer on a busy machine)."""
    deadline = time.monotonic() + within
    while True:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            chain = chain_of(handle.read())
        if chain is not None or time.monotonic() > deadline:
            return chain
        time.sleep(0.01)


async def gone(pids: list[int], within: float = 10.0) -> float:
    return await anyio.to_thread.run_sync(wait_until_gone, pids, within)


async def start_tree(tag: RunTag | None) -> tuple[ChildProcess, int]:
    child = await ChildProcess.start(
        [PY, "-c", SETSID_GRANDCHILD], env=scrubbed_env(), cwd="/", tag=tag
    )
    grandchild = int(await child.stdout.readline())
    return child, grandchild


def test_tags_are_unique_and_append_to_the_inherited_chain() -> None:
    a, b = RunTag(inherited=""), RunTag(inherited="")
    assert a.element != b.element
    assert a.element.startswith(watchdog().owner + "/")
    assert a.chain == a.element
    assert a.env == {TAG_VARIABLE: a.element}
    nested = RunTag(inherited=a.chain)
    assert nested.chain == f"{a.element}:{nested.element}"


async def test_tag_finds_the_tree_and_terminate_kills_a_grandchild_outside_the_group() -> None:
    before = live_children()
    tag = RunTag()
    child, grandchild = await start_tree(tag)
    deadline = time.monotonic() + 10  # a process just past execve may show no environ yet
    while sorted(await anyio.to_thread.run_sync(tag.pids)) != sorted([child.pid, grandchild]):
        assert time.monotonic() < deadline, (tag.pids(), child.pid, grandchild)
        await asyncio.sleep(0.01)
    assert grandchild not in child.live_group_members()  # own session: killpg misses it
    await child.terminate(eof_grace=0, term_grace=0.2)
    assert not alive(grandchild)  # terminate returns once the sweep is done
    assert tag.pids() == []
    assert tag.sweep() == 0  # nothing left to kill
    assert live_children() - before == set()


async def test_without_a_tag_the_grandchild_in_its_own_session_survives_the_group_kill() -> None:
    """Why tags exist: the control case, cleaned up by hand."""
    child, grandchild = await start_tree(None)
    try:
        await child.terminate(eof_grace=0, term_grace=0.2)
        await asyncio.sleep(0.1)
        assert alive(grandchild)
    finally:
        os.kill(grandchild, 9)
        await gone([grandchild])


async def test_sweeping_the_outer_run_kills_the_grandchild_of_a_nested_run() -> None:
    """Issue 10 item 2: the nested run appends its element to the chain it inherited
    (it used to overwrite it), so the OUTER run's sweep finds the grandchild, which
    sits in a session of its own (out of reach of every group kill)."""
    before = live_children()
    outer = RunTag()
    child = await ChildProcess.start(
        [PY, "-c", NESTED, "tag"], env={**os.environ}, cwd="/", tag=outer
    )
    info = json.loads(await child.stdout.readline())
    grandchild, inner_watchdog = info["grandchild"], info["watchdog"]
    assert environ_chain(child.pid) == [outer.element]
    assert environ_chain(grandchild) == [outer.element, info["element"]]
    assert grandchild not in child.live_group_members()
    assert sorted(outer.pids()) == sorted([child.pid, grandchild])

    killed = await anyio.to_thread.run_sync(outer.sweep)
    assert killed >= 2
    await gone([child.pid, grandchild, inner_watchdog])
    assert await child.terminate() == "exited"  # already dead: nothing to wait for
    assert live_children() - before == set()


async def test_an_untagged_child_of_a_tagged_process_keeps_the_inherited_chain() -> None:
    """A process inside a tagged tree that starts a child without a tag of its own, in a
    scrubbed environment, must not drop the chain it inherited: the outer sweep still
    reaches that child (it has a session of its own)."""
    before = live_children()
    outer = RunTag()
    child = await ChildProcess.start(
        [PY, "-c", NESTED, "none"], env={**os.environ}, cwd="/", tag=outer
    )
    info = json.loads(await child.stdout.readline())
    grandchild, inner_watchdog = info["grandchild"], info["watchdog"]
    try:
        assert environ_chain(grandchild) == [outer.element]
        assert grandchild in outer.pids()
    finally:
        await child.terminate(eof_grace=0, term_grace=1)
        for pid in (grandchild, inner_watchdog):
            if alive(pid):
                os.kill(pid, 9)
        await gone([child.pid, grandchild, inner_watchdog])
    assert live_children() - before == set()


async def test_sweep_later_goes_through_the_watchdog() -> None:
    tag = RunTag()
    child, grandchild = await start_tree(tag)
    started = time.monotonic()
    tag.sweep_later()  # returns at once; the watchdog does the scan (and the waiting)
    assert time.monotonic() - started < 1.0  # not the terminate grace of a swept tree
    await gone([child.pid, grandchild])
    assert await child.terminate() == "exited"
