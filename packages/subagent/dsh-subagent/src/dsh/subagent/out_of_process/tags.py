"""Find and kill every process of one child tree, wherever it went.

A process group does not hold a whole tree: agent products start tool commands
in sessions of their own (``setsid``), and a killed parent's children are
re-parented to init. What they all keep is their environment. A
:class:`ProcessTag` is one unique ``NAME=value`` entry put into a child's
environment; every descendant inherits it, so ``/proc/<pid>/environ`` finds them
all, in any session, after any re-parenting::

    tag = ProcessTag()
    child = await ChildProcess.start(argv, env=scrubbed_env(), cwd=cwd, tag=tag)
    ...
    tag.sweep()          # SIGKILL every live process carrying the tag

Limits: a process that replaces its environment (``env -i ...``, ``execve`` with
a fresh one) drops the tag; only processes this user may read are found (all of
one's own); Linux only (elsewhere :meth:`ProcessTag.pids` finds nothing).
"""

from __future__ import annotations

import os
import signal
import time
import uuid

__all__ = ["TAG_VARIABLE", "ProcessTag"]

TAG_VARIABLE = "DSH_PROCESS_TAG"
"""The environment variable a :class:`ProcessTag` sets by default."""


class ProcessTag:
    """A unique environment entry that marks every process of one child tree."""

    __slots__ = ("_needle", "name", "value")

    def __init__(self, value: str | None = None, *, name: str = TAG_VARIABLE) -> None:
        if not name or "=" in name or "\0" in name:
            raise ValueError(
                f"a process tag needs a variable name without '=' or NUL, got {name!r}"
            )
        self.name = name
        self.value = value or uuid.uuid4().hex
        """Unique per tag (a fresh UUID unless given)."""
        if "\0" in self.value:
            raise ValueError("a process tag value cannot contain NUL")
        self._needle = f"{self.name}={self.value}".encode()

    @property
    def env(self) -> dict[str, str]:
        """The entry to merge into the child's environment."""
        return {self.name: self.value}

    def pids(self) -> list[int]:
        """Live (non-zombie) processes carrying this tag, this process excluded."""
        try:
            entries = os.listdir("/proc")
        except OSError:
            return []
        me = os.getpid()
        found: list[int] = []
        for entry in entries:
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if self._needle not in handle.read().split(b"\0"):
                        continue
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    state = handle.read().rsplit(b")", 1)[-1].split()[:1]
            except OSError:  # gone, or not ours to read
                continue
            if state != [b"Z"]:
                found.append(int(entry))
        return found

    def signal(self, sig: int) -> int:
        """Send ``sig`` to every live tagged process; how many were signalled."""
        sent = 0
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                continue
            sent += 1
        return sent

    def sweep(self, *, rounds: int = 20, pause: float = 0.002) -> int:
        """SIGKILL tagged processes until none is left (or ``rounds`` ran out).

        Synchronous (no await), so it also works from a ``finally`` reached by a
        second cancellation. Repeats to catch processes forked mid-sweep, and
        ends only after two empty looks ``pause`` apart: a process in the middle
        of ``execve`` briefly shows an empty environment. Returns how many kills
        were sent.
        """
        killed = 0
        empty = 0
        for _ in range(rounds):
            sent = self.signal(signal.SIGKILL)
            killed += sent
            empty = 0 if sent else empty + 1
            if empty == 2:
                break
            time.sleep(pause)  # let the kernel tear them down before looking again
        return killed

    def __repr__(self) -> str:
        return f"<ProcessTag {self.name}={self.value}>"
