"""The code behind :mod:`dsh.testing.processes` (its docstring says what it is)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable

import psutil  # type: ignore[import-untyped,unused-ignore]

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

_USE_PROC = os.path.isfile("/proc/self/stat")
"""Read ``/proc`` directly (the fast path); else ask psutil. (Tests flip it to
exercise the psutil path on Linux.)"""


# -- the two backends -------------------------------------------------------------------


def _proc_stat(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return None


def _proc_table() -> dict[int, tuple[int, bool]]:
    """``pid → (parent pid, zombie)`` for every process, one pass over ``/proc``."""
    table: dict[int, tuple[int, bool]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        rest = _proc_stat(entry)
        if rest is not None and len(rest) > 1:
            table[int(entry)] = (int(rest[1]), rest[0] == b"Z")
    return table


def _psutil_table() -> dict[int, tuple[int, bool]]:
    """``pid → (parent pid, zombie)`` for every process psutil can see."""
    table: dict[int, tuple[int, bool]] = {}
    for process in psutil.process_iter(["ppid", "status"]):
        info = process.info
        ppid, status = info.get("ppid"), info.get("status")
        if isinstance(ppid, int):
            table[int(process.pid)] = (ppid, status == psutil.STATUS_ZOMBIE)
    return table


def _children() -> dict[int, bool]:
    """``pid → zombie`` for this process's children."""
    me = os.getpid()
    if _USE_PROC:
        return {pid: zombie for pid, (ppid, zombie) in _proc_table().items() if ppid == me}
    found: dict[int, bool] = {}
    try:
        children = psutil.Process(me).children()
    except psutil.Error:
        return found
    for child in children:
        try:
            found[int(child.pid)] = child.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:  # e.g. access denied: it exists, count it as live
            found[int(child.pid)] = False
    return found


def _live_parents() -> dict[int, int]:
    """``pid → parent pid`` of every live (non-zombie) process, read once."""
    table = _proc_table() if _USE_PROC else _psutil_table()
    return {pid: ppid for pid, (ppid, zombie) in table.items() if not zombie}


# -- the questions tests ask ------------------------------------------------------------


def live_children() -> set[int]:
    """Pids of this process's children that are not zombies (this process's dsh
    watchdog excluded: it lives as long as this process, by design)."""
    found = {pid for pid, zombie in _children().items() if not zombie}
    watchdog = _watchdog_pid()
    if watchdog is not None:
        found.discard(watchdog)
    return found


def _watchdog_pid() -> int | None:
    """The pid of this process's dsh watchdog, if dsh.subprocess started one (not
    imported here: dsh-testing does not depend on it, and asking must not start it)."""
    module = sys.modules.get("dsh.subprocess")
    if module is None:
        return None
    pid: int | None = module.watchdog().pid
    return pid


def reap_zombies(exclude: Iterable[int] = ()) -> None:
    """Reap zombie children not in ``exclude`` (orphans re-parented to us)."""
    skip = set(exclude)
    for pid, zombie in _children().items():
        if zombie and pid not in skip:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def cmdline(pid: int) -> str:
    """The command line of ``pid``, arguments joined by spaces ('' if gone or a zombie)."""
    if _USE_PROC:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            return ""
    try:
        return " ".join(str(part) for part in psutil.Process(pid).cmdline()).strip()
    except psutil.Error:
        return ""


def describe(pid: int) -> str:
    """``pid: command line`` for messages."""
    return f"{pid}: {(cmdline(pid) or '?')[:200]}"


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    if _USE_PROC:
        rest = _proc_stat(pid)
        return rest is not None and rest[:1] != [b"Z"]
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # exists, but we may not look at it
        return True


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
    (one consistent read of the process table)."""
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
