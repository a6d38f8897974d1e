"""The process table, as tests see it: live children of this process.

With the dsh-testing pytest plugin the test runner is a child subreaper, so an
orphaned descendant (a product's tool process, a child whose parent died) is
re-parented here and shows up too.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["describe", "live_children", "reap_zombies"]


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
    """Pids of this process's children that are not zombies."""
    return {pid for pid, state in _children().items() if state != "Z"}


def reap_zombies(exclude: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    """Reap zombie children not in ``exclude`` (orphans re-parented to us)."""
    for pid, state in _children().items():
        if state == "Z" and pid not in exclude:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def describe(pid: int) -> str:
    """``pid: command line`` for messages."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmdline = "?"
    return f"{pid}: {cmdline[:200]}"
