"""The OS sandbox: a process and everything it starts, confined by bubblewrap.

:class:`Sandbox` turns a :class:`~dsh.core.permissions.SandboxPolicy` into a ``bwrap`` command
line around an argv. :meth:`ChildProcess.start(..., sandbox=...)
<dsh.subprocess.ChildProcess.start>` applies it, so every process a tool starts
(shell commands, stdio MCP servers) and every agent process a provider starts runs
inside one:

* the root file system read-only (``/tmp`` included); the writable directories of the
  policy (the working directory, ``writable_roots``) bound writable, and the protected
  paths in them (``.git``, ``.dsh``, the preset files) bound read-only again, unless
  ``allow_write`` names them; ``TMPDIR`` is a private, empty, memory-backed directory
  (``/dev/shm`` of the sandbox's own ``/dev``) that goes away with the sandbox;
* a new PID namespace with its own ``/proc``: the sandboxed process cannot see dsh's
  processes, so it cannot read their environment (API keys, tokens) from
  ``/proc/<pid>/environ``; when its first process ends or the sandbox's parent dies
  (``--die-with-parent``) the kernel kills everything left in it, ``setsid env -i``
  escapees included;
* no network unless the policy allows it (``--unshare-net``), except for agent
  processes that must reach their model (``share_network``);
* a new session (no ``TIOCSTI`` into dsh's terminal) and IPC namespace.

If bubblewrap is missing or cannot create namespaces here, starting fails with
:class:`SandboxUnavailableError`, which says how to fix it: a sandbox that cannot
start never runs the command unsandboxed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from dsh.core.permissions import PROTECTED_NAMES, SANDBOX_ENV, SandboxPolicy
from dsh.subprocess._errors import ProcessStartError

__all__ = ["Sandbox", "SandboxUnavailableError", "check_command", "check_sandbox"]

BWRAP = "bwrap"
PRIVATE_TMP = "/dev/shm"
"""``TMPDIR`` inside the sandbox: the sandbox's own ``/dev`` is a fresh tmpfs."""


class SandboxUnavailableError(ProcessStartError):
    """The sandbox cannot start here (no bubblewrap, no user namespaces); the message
    says how to install or enable it, or how to turn the sandbox off explicitly."""


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A policy applied to one process: ``allow_write`` exempts paths from protection
    (a row's explicit ``allow_write``), ``share_network`` keeps the network for an agent
    process that must reach its model, ``extra_writable`` adds directories a product
    needs for its own state."""

    policy: SandboxPolicy
    allow_write: tuple[str, ...] = ()
    share_network: bool = False
    extra_writable: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        """False when the policy's mode is ``off``: the argv runs as it is."""
        return self.policy.enabled

    def env(self, cwd: str) -> dict[str, str]:
        """Variables for the sandboxed process: the policy for dsh processes inside
        (:data:`~dsh.core.permissions.SANDBOX_ENV`), which their own presets can only narrow, and a
        private ``TMPDIR``."""
        return {SANDBOX_ENV: self.policy.pinned(cwd).to_json(), "TMPDIR": PRIVATE_TMP}

    def wrap(self, argv: list[str], cwd: str) -> list[str]:
        """``argv`` inside bubblewrap for this policy (unchanged for mode ``off``).
        Blocking the first time (it checks once that bubblewrap works here)."""
        if not self.enabled:
            return list(argv)
        bwrap = check_sandbox()
        cwd = os.path.realpath(cwd)
        args = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
        if not (self.policy.network or self.share_network):
            args.append("--unshare-net")
        args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        writable = [d for d in self._writable(cwd) if os.path.isdir(d)]
        for directory in writable:
            args += ["--bind", directory, directory]
        for path in self._protected(writable):
            args += ["--ro-bind", path, path]
        for path in self._allowed(writable):
            args += ["--bind", path, path]
        args += ["--chdir", cwd, "--", *argv]
        return args

    def _writable(self, cwd: str) -> list[str]:
        return list(self.policy.bind_dirs(cwd, self.extra_writable))

    def _protected(self, writable: list[str]) -> list[str]:
        found = [
            os.path.join(directory, name)
            for directory in writable
            for name in PROTECTED_NAMES
            if os.path.lexists(os.path.join(directory, name))
        ]
        found += [p for p in self.policy.protected if os.path.exists(p)]
        return [p for p in dict.fromkeys(found) if SandboxPolicy.inside(p, writable)]

    def _allowed(self, writable: list[str]) -> list[str]:
        allowed = (os.path.realpath(p) for p in self.allow_write)
        return [p for p in allowed if os.path.exists(p) and SandboxPolicy.inside(p, writable)]


def check_command(what: str, command: str, env: Mapping[str, str], cwd: str) -> None:
    """Inside a sandbox a missing command is bubblewrap's exit 1: say it before, in the
    words an unsandboxed start would use."""
    path = (
        os.path.join(cwd, command)
        if "/" in command
        else shutil.which(command, path=env.get("PATH", os.defpath))
    )
    if path is None or not os.path.exists(path):
        raise ProcessStartError(f"could not start {what} {command!r}: No such file or directory")
    if not os.access(path, os.X_OK) or os.path.isdir(path):
        raise ProcessStartError(f"could not start {what} {command!r}: Permission denied")


_checked: str | None = None
_check_lock = threading.Lock()


def check_sandbox() -> str:
    """The path of a bubblewrap that works here (checked once per process, by running
    a trivial sandbox); :class:`SandboxUnavailableError` with the fix otherwise."""
    global _checked
    with _check_lock:
        if _checked is not None:
            return _checked
        bwrap = shutil.which(BWRAP)
        if bwrap is None:
            raise SandboxUnavailableError(
                "the sandbox needs bubblewrap (bwrap), which is not installed: install it"
                " (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install"
                " bubblewrap; Arch: pacman -S bubblewrap), or, to run tools unsandboxed,"
                ' write mode = "off" in the preset\'s [sandbox] table'
            )
        probe = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-net", "--ro-bind"]
        probe += ["/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"]
        try:
            done = subprocess.run(probe, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailableError(f"bubblewrap ({bwrap}) could not run: {exc}") from None
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
            raise SandboxUnavailableError(
                f"bubblewrap ({bwrap}) cannot create a sandbox here: {said}. It needs"
                " unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1;"
                " on Ubuntu 24.04+ an AppArmor profile for bwrap, or"
                " kernel.apparmor_restrict_unprivileged_userns=0), or a setuid bwrap; in a"
                " container, run it with user namespaces allowed. To run tools unsandboxed"
                ' instead, write mode = "off" in the preset\'s [sandbox] table'
            )
        _checked = bwrap
        return bwrap
