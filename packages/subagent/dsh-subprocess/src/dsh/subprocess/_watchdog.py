"""The watchdog: a tiny process outside its dsh process's fate (stdlib only).

Started once per dsh process, in a session of its own, by
:func:`dsh.subprocess._supervisor.watchdog`, with the source of ``_scan.py`` and
this file passed to ``python -I -S -c`` (so it starts in milliseconds and imports
nothing of dsh). It reads commands on stdin, one per line:

``group <pgid>`` / ``ungroup <pgid>``
    a child's process group to kill if the dsh process dies (every platform);
``sweep <element>``
    kill every process whose tag chain holds ``<element>`` now (a teardown that
    could not wait for its own sweep);
At end of input (the dsh process exited or died, however it died) it kills the
groups it knows and every process still carrying a tag of its owner (normally
none after a clean exit), then exits.
At start it also sweeps trees left by dsh processes that died before (their
owner is gone) — the startup sweep.
"""

import contextlib
import os
import signal
import sys
import time

# The functions of _scan.py are defined above this file's text when it runs as the
# watchdog (``-c`` with both sources); imported as a module, import them.
if "sweep" not in globals():  # pragma: no cover - module import path
    from dsh.subprocess._scan import dead_owners, proc_available, sweep


def _kill_groups(groups: set[int]) -> None:
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def main(owner: str) -> int:
    """Watch stdin until it ends (see the module docstring)."""
    with contextlib.suppress(OSError):
        os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    scan = proc_available()
    if scan:
        try:
            dead = dead_owners()
            if dead:
                sweep(owners=dead)
        except Exception:  # never die before watching
            pass
    groups: set[int] = set()
    stdin = sys.stdin.buffer
    for raw in iter(stdin.readline, b""):
        command, _, argument = raw.decode(errors="replace").strip().partition(" ")
        if command == "group" and argument.isdigit():
            groups.add(int(argument))
        elif command == "ungroup" and argument.isdigit():
            groups.discard(int(argument))
        elif command == "sweep" and argument and scan:
            sweep(elements=[argument])
    # The dsh process is gone: its groups first (fast), then everything tagged.
    _kill_groups(groups)
    if scan:
        sweep(owners=[owner])
        time.sleep(0.05)
        sweep(owners=[owner])
    _kill_groups(groups)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1]))
