"""The process table, as tests see it: live children of this process.

With the dsh-testing pytest plugin the test runner is a child subreaper, so an
orphaned descendant (a product's tool process, a child whose parent died) is
re-parented here and shows up too.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable

__all__ = [
    "alive",
    "cmdline",
    "descendants",
    "describe",
    "live_children",
    "process_tree",
    "reap_zombies",
    "wait_until_gone",
]


def _children() -> dict[int, str]:
    me = os.getpid()
    found: dict[int, str] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        rest = stat.rsplit(")", 1)[-1].split()
        if len(rest) > 2 and int(rest[1]) == me:
            found[int(entry)] = rest[0]
    return found


def live_children() -> set[int]:
    """Pids of this process's children that are not zombies (this process's dsh
    watchdog excluded: it lives as long as this process, by design)."""
    found = {pid for pid, state in _children().items() if state != "Z"}
    watchdog = _watchdog_pid()
    if watchdog is not None:
        found.discard(watchdog)
    return found


def _watchdog_pid() -> int | None:
    module = sys.modules.get("dsh.subprocess._supervisor")
    if module is None:
        return None
    pid: int | None = module.watchdog().pid
    return pid


def reap_zombies(exclude: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    """Reap zombie children not in ``exclude`` (orphans re-parented to us)."""
    for pid, state in _children().items():
        if state == "Z" and pid not in exclude:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def cmdline(pid: int) -> str:
    """The command line of ``pid``, arguments joined by spaces ('' if gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def describe(pid: int) -> str:
    """``pid: command line`` for messages."""
    return f"{pid}: {(cmdline(pid) or '?')[:200]}"


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[:1] != [b"Z"]
    except OSError:
        return False


def _live_parents() -> dict[int, int]:
    """``pid → parent pid`` of every live (non-zombie) process, read once from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                rest = handle.read().rsplit(b")", 1)[-1].split()
        except OSError:
            continue
        if len(rest) > 1 and rest[0] != b"Z":
            parents[int(entry)] = int(rest[1])
    return parents


def _descendants_in(parents: dict[int, int], roots: Iterable[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def descendants(pid: int) -> set[int]:
    """Live descendants of ``pid`` (children, grandchildren, ... in any session)."""
    return _descendants_in(_live_parents(), [pid])


def process_tree(roots: Iterable[int]) -> set[int]:
    """The live (non-zombie) processes among ``roots``, with all their live descendants
    (one consistent read of /proc)."""
    parents = _live_parents()
    alive_roots = {pid for pid in roots if pid in parents}
    return alive_roots | _descendants_in(parents, alive_roots)


def wait_until_gone(pids: Iterable[int], within: float) -> float:
    """Seconds until every process in ``pids`` is gone (or a zombie); AssertionError after
    ``within``. Blocking: run it in a thread from async code. Reaps nothing, so an
    event loop's child watcher still gets its children's exit status."""
    pending = set(pids)
    started = time.monotonic()
    while True:
        pending = {pid for pid in pending if alive(pid)}
        elapsed = time.monotonic() - started
        if not pending:
            return elapsed
        if elapsed > within:
            raise AssertionError(
                f"still running after {within} s:\n"
                + "\n".join(describe(p) for p in sorted(pending))
            )
        time.sleep(0.005)
