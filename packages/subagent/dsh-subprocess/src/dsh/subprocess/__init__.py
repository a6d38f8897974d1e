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
* :func:`scrubbed_env` — an allow-listed environment (:data:`EnvVariables` and
  :data:`EnvNames` check a config's ``env`` and ``passthrough_env``); :func:`provider_env` — the
  environment a provider's processes share (what a pooled process runs with).
* :class:`Sandbox` — a :class:`~dsh.core.permissions.SandboxPolicy` applied to one process with
  bubblewrap (read-only root, writable workspace, protected ``.git``/``.dsh``/presets,
  own PID namespace, network off unless allowed); ``ChildProcess.start(sandbox=...)``;
  :func:`provider_sandbox` — the one a provider's child runs in.
* :class:`ProcessPool` — warm processes for runs to take (:class:`PoolConfig`:
  ``size``, ``max_runs``, ``idle_timeout``), recycled after errors, cancels, too
  many runs, an exit, or idleness; a transport subclasses :class:`PooledProcess`;
  :class:`PoolsByContext` gives a provider one pool per context, closed with it
  (:class:`PooledProvider`: the base of a provider that keeps warm processes;
  :class:`PooledRun`: of its runs, which take one and give it back);
  :func:`start_pooled_process` is a pool's ``start`` (spawn, connect, handshake).
* :class:`Terminal` — a command running in the background with the tail of its
  output (ACP's ``terminal/*``); a tool offers a :class:`TerminalOpener` under
  :data:`TERMINAL_EXTENSION` in its ``extensions``.

A watchdog process (started with the first child) kills every child tree of this
process if this process dies, however it dies; at start it also sweeps trees a
crashed dsh process left behind.
"""

from dsh.subprocess._config import SubprocessConfig
from dsh.subprocess._cwd import check_directory, resolve_child_cwd
from dsh.subprocess._env import (
    SAFE_ENV_NAMES,
    EnvNames,
    EnvVariables,
    env_from_pairs,
    scrubbed_env,
)
from dsh.subprocess._errors import ProcessStartError
from dsh.subprocess._pool import ProcessPool
from dsh.subprocess._pool_start import start_pooled_process
from dsh.subprocess._pooled import PoolClosed, PoolConfig, PooledProcess, Starting
from dsh.subprocess._pooled_run import PooledRun
from dsh.subprocess._pools import PooledProvider, PoolsByContext
from dsh.subprocess._process import ChildProcess, Ending
from dsh.subprocess._run import SubprocessRun, provider_env, provider_sandbox
from dsh.subprocess._sandbox import Sandbox, SandboxUnavailableError, check_sandbox
from dsh.subprocess._scan import TAG_VARIABLE
from dsh.subprocess._supervisor import WATCHDOG_MARK, RunTag, watchdog
from dsh.subprocess._tail import StderrTail
from dsh.subprocess._terminal import TERMINAL_EXTENSION, Terminal, TerminalOpener

__all__ = [
    "SAFE_ENV_NAMES",
    "TAG_VARIABLE",
    "TERMINAL_EXTENSION",
    "WATCHDOG_MARK",
    "ChildProcess",
    "Ending",
    "EnvNames",
    "EnvVariables",
    "PoolClosed",
    "PoolConfig",
    "PooledProcess",
    "PooledProvider",
    "PooledRun",
    "PoolsByContext",
    "ProcessPool",
    "ProcessStartError",
    "RunTag",
    "Sandbox",
    "SandboxUnavailableError",
    "Starting",
    "StderrTail",
    "SubprocessConfig",
    "SubprocessRun",
    "Terminal",
    "TerminalOpener",
    "check_directory",
    "check_sandbox",
    "env_from_pairs",
    "provider_env",
    "provider_sandbox",
    "resolve_child_cwd",
    "scrubbed_env",
    "start_pooled_process",
    "watchdog",
]
