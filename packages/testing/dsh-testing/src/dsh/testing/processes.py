"""The process table, as tests see it: live children of this process.

With the dsh-testing pytest plugin the test runner is a child subreaper (Linux),
so an orphaned descendant (a product's tool process, a child whose parent died)
is re-parented here and shows up too.

Where ``/proc`` exists it is read directly (about three times faster than going
through psutil for a whole-table read); elsewhere (macOS, BSDs) psutil answers the
same questions, so no check here passes silently for want of ``/proc``.

:class:`PtyProcess` runs a command on a pseudo-terminal, as a user's terminal does;
:class:`JsonLinesProcess` speaks raw JSON lines to a stdio server
(:class:`ThreadlessJsonLinesProcess`: with no reader thread, for a client that stops
reading); :func:`run_cli` runs ``python -m <module>`` to its end, its output captured;
:func:`node_entry` finds a Node.js program one of the project's installers put under
``.tools/``.
"""

from dsh.testing._installed import node_entry
from dsh.testing._json_lines import JsonLinesProcess, ThreadlessJsonLinesProcess
from dsh.testing._processes import (
    alive,
    cmdline,
    descendants,
    describe,
    live_children,
    process_tree,
    reap_zombies,
    wait_until_gone,
)
from dsh.testing._pty import ANSI, PtyProcess
from dsh.testing._run import run_cli

__all__ = [
    "ANSI",
    "JsonLinesProcess",
    "PtyProcess",
    "ThreadlessJsonLinesProcess",
    "alive",
    "cmdline",
    "descendants",
    "describe",
    "live_children",
    "node_entry",
    "process_tree",
    "reap_zombies",
    "run_cli",
    "wait_until_gone",
]
