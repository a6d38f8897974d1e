"""dsh.subprocess — children that are local processes, and never outlive their run.

The process half of the provider kit, shared by every provider (and tool) that
starts processes:

* :class:`SubprocessRun` — :class:`dsh.subagent.kit.RemoteRun` for a process child:
  spawn, teardown, stderr tail in diagnostics, scrubbed environment, depth carried.
* :class:`SubprocessConfig` — ``command``, ``args``, ``cwd``, ``env``,
  ``passthrough_env``, ``eof_grace``, ``term_grace`` (plus the kit's timeouts).
* :class:`ChildProcess` — a process in its own group, spawned off the event loop,
  torn down SIGTERM-then-SIGKILL, reaped, its tag swept; :class:`RunTag` marks a
  run's whole tree (nested delegations append to the chain).
* :func:`scrubbed_env` — an allow-listed environment.

A watchdog process (started with the first child) kills every child tree of this
process if this process dies, however it dies; at start it also sweeps trees a
crashed dsh process left behind.
"""

from dsh.subprocess._config import SubprocessConfig
from dsh.subprocess._cwd import check_directory, resolve_child_cwd
from dsh.subprocess._env import SAFE_ENV_NAMES, scrubbed_env
from dsh.subprocess._errors import ProcessStartError
from dsh.subprocess._process import ChildProcess, Ending
from dsh.subprocess._run import SubprocessRun
from dsh.subprocess._scan import TAG_VARIABLE
from dsh.subprocess._supervisor import WATCHDOG_MARK, RunTag, watchdog
from dsh.subprocess._tail import StderrTail

__all__ = [
    "SAFE_ENV_NAMES",
    "TAG_VARIABLE",
    "WATCHDOG_MARK",
    "ChildProcess",
    "Ending",
    "ProcessStartError",
    "RunTag",
    "StderrTail",
    "SubprocessConfig",
    "SubprocessRun",
    "check_directory",
    "resolve_child_cwd",
    "scrubbed_env",
    "watchdog",
]
