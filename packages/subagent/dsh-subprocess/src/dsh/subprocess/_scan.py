"""Finding the processes of a tagged tree (stdlib only: the watchdog runs this too).

Every process a dsh process starts carries ``DSH_PROCESS_TAG`` in its environment,
and every descendant inherits it. The value is a chain, outermost first, of one
element per delegation level: ``<owner>/<run>:<owner>/<run>...``. An *owner* is
``<pid>.<start time>`` of the dsh process that started the level (the start time
tells a reused pid apart), a *run* is unique within it. A nested delegation
appends its element instead of replacing the chain, so sweeping the outer run
also finds the grandchildren the inner one started.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Iterator

TAG_VARIABLE = "DSH_PROCESS_TAG"
_NEEDLE = TAG_VARIABLE.encode() + b"="


def proc_available() -> bool:
    """True where ``/proc`` lists processes and their environments (Linux)."""
    return os.path.isdir("/proc/self") and os.path.exists("/proc/self/environ")


def start_time(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (None if gone or unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return None
    # after the command name: state is field 3; starttime is field 22
    return fields[19].decode() if len(fields) > 19 else None


def pid_namespace() -> str:
    """This process's PID namespace (its inode; empty if unknown)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def owner_of_this_process() -> str:
    """This process's owner id, ``<pid>.<start time>.<PID namespace>``."""
    pid = os.getpid()
    return f"{pid}.{start_time(pid) or '0'}.{pid_namespace()}"


def owner_alive(owner: str) -> bool:
    """True if the process behind ``owner`` still runs (same pid, same start time), or
    if it is in another PID namespace (a sandbox's, or the one around this sandbox):
    its pid means nothing here, it is not ours to judge."""
    pid_text, _, rest = owner.partition(".")
    started, _, namespace = rest.partition(".")
    if not pid_text.isdigit() or (namespace and namespace != pid_namespace()):
        return True  # not ours to judge
    pid = int(pid_text)
    if not state_alive(pid):
        return False
    current = start_time(pid)
    return current is None or current == started


def state_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[:1] != [b"Z"]
    except OSError:
        return False


def chain_of(environ: bytes) -> list[str] | None:
    """The tag chain in a ``/proc/<pid>/environ`` blob (None without a tag)."""
    for entry in environ.split(b"\0"):
        if entry.startswith(_NEEDLE):
            value = entry[len(_NEEDLE) :].decode(errors="replace")
            return [element for element in value.split(":") if element]
    return None


def tagged_processes() -> Iterator[tuple[int, list[str]]]:
    """``(pid, chain)`` of every live, readable process carrying a tag (not this one)."""
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                chain = chain_of(handle.read())
        except OSError:  # gone, or not ours to read
            continue
        if chain is not None and state_alive(pid):
            yield pid, chain


def matching(elements: Iterable[str] = (), owners: Iterable[str] = ()) -> list[int]:
    """Live tagged processes whose chain holds one of ``elements`` or an element of
    one of ``owners``."""
    wanted = set(elements)
    wanted_owners = set(owners)
    found: list[int] = []
    for pid, chain in tagged_processes():
        for element in chain:
            if element in wanted or element.partition("/")[0] in wanted_owners:
                found.append(pid)
                break
    return found


def sweep(
    elements: Iterable[str] = (),
    owners: Iterable[str] = (),
    *,
    rounds: int = 25,
    pause: float = 0.004,
) -> int:
    """SIGKILL matching processes until none is left (or ``rounds`` ran out).

    Repeats to catch processes forked mid-sweep, and ends only after two empty looks
    ``pause`` apart: a process in the middle of ``execve`` briefly shows an empty
    environment. Returns how many kills were sent.
    """
    elements, owners = list(elements), list(owners)
    killed = 0
    empty = 0
    for _ in range(rounds):
        sent = 0
        for pid in matching(elements, owners):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            sent += 1
        killed += sent
        empty = 0 if sent else empty + 1
        if empty == 2:
            break
        time.sleep(pause)
    return killed


def dead_owners() -> set[str]:
    """Owners named in some live process's tag chain whose dsh process is gone."""
    owners: set[str] = set()
    for _pid, chain in tagged_processes():
        for element in chain:
            owners.add(element.partition("/")[0])
    return {owner for owner in owners if not owner_alive(owner)}
