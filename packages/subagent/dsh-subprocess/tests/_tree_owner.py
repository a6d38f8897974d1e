"""A dsh process for the watchdog tests (run as a script, not collected by pytest).

``python _tree_owner.py [--all-tagged]`` starts, through ChildProcess:

* unless ``--all-tagged``: an untagged child with a grandchild in its process group;
* a tagged child that starts a grandchild in a session of its own;
* a tagged child that ignores SIGTERM;

prints one JSON line ``{"owner": pid, "watchdog": pid, "pids": [...every descendant...]}``
and idles until it is killed.

``python _tree_owner.py --idle`` only starts this process's watchdog (which sweeps the
trees of dead owners as it starts), prints ``{"owner", "watchdog"}`` and exits when its
stdin closes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from dsh.subprocess import ChildProcess, RunTag, scrubbed_env, watchdog

PY = sys.executable

GROUP_GRANDCHILD = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(g.pid, flush=True)
time.sleep(60)
"""

SETSID_GRANDCHILD = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                     start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(g.pid, flush=True)
time.sleep(60)
"""

STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print(0, flush=True); time.sleep(60)"
)


async def tree(all_tagged: bool) -> None:
    pids: list[int] = []
    scripts = [SETSID_GRANDCHILD, STUBBORN] if all_tagged else [GROUP_GRANDCHILD]
    if not all_tagged:
        scripts.append(SETSID_GRANDCHILD)
    for index, script in enumerate(scripts):
        tagged = all_tagged or index > 0
        child = await ChildProcess.start(
            [PY, "-c", script], env=scrubbed_env(), cwd="/", tag=RunTag() if tagged else None
        )
        pids.append(child.pid)
        reported = int(await child.stdout.readline())
        if reported:
            pids.append(reported)
    print(json.dumps({"owner": os.getpid(), "watchdog": watchdog().pid, "pids": pids}), flush=True)
    await asyncio.sleep(120)


def idle() -> None:
    dog = watchdog()
    dog.ensure_started()
    print(json.dumps({"owner": os.getpid(), "watchdog": dog.pid}), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    if "--idle" in sys.argv:
        idle()
    else:
        asyncio.run(tree("--all-tagged" in sys.argv))
