"""Who may bind where, and with which tokens: the rules ``dsh a2a`` and ``dsh mcp
--http`` share.

* :func:`read_tokens` — the bearer tokens from the environment variables the
  ``--token-env`` options name; a non-loopback bind without one is refused. Each
  variable is removed from the environment once read (nothing the server starts
  inherits it) and blanked in the process's initial environment block on Linux.
* :func:`host_policy` — the ``Host`` / ``Origin`` allow-list for a bind.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from dsh.core import DshError
from dsh.http_guard._guard import HostPolicy

__all__ = [
    "BindError",
    "host_policy",
    "is_loopback",
    "read_tokens",
    "scrub_initial_environment",
]


class BindError(DshError):
    """A bind the rules refuse, or a token variable that cannot be used."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_tokens(token_envs: Sequence[str], host: str) -> dict[str, str]:
    """The bearer tokens by name (empty: no auth). Refuses a non-loopback ``host``
    without one (:class:`BindError`). Each variable is removed from this process's
    environment once read (and blanked in its initial environment block, see
    :func:`scrub_initial_environment`)."""
    if not token_envs:
        if not is_loopback(host):
            raise BindError(
                f"refusing to bind {host} without authentication: pass --token-env NAME"
                " (the environment variable that holds the bearer token every request must"
                " carry), or bind 127.0.0.1"
            )
        return {}
    tokens: dict[str, str] = {}
    for name in token_envs:
        raw = os.environ.pop(name, None)
        if raw is not None:
            scrub_initial_environment(name, raw)
        if name in tokens:
            continue
        if not raw or not raw.strip():
            raise BindError(f"--token-env {name}: the environment variable is not set or empty")
        if raw.strip() in tokens.values():
            raise BindError(
                f"--token-env {name}: holds the same token as another --token-env variable;"
                " give each caller a token of its own"
            )
        tokens[name] = raw.strip()
    return tokens


def scrub_initial_environment(name: str, value: str) -> bool:
    """Overwrite ``NAME=value`` in this process's initial environment block (what
    ``/proc/<pid>/environ`` shows) with zero bytes; True when done. Linux only; the
    variable must already be gone from ``os.environ`` (nothing points at the block's
    copy then)."""
    if not sys.platform.startswith("linux"):
        return False
    entry = os.fsencode(name) + b"=" + os.fsencode(value)
    try:
        stat = Path("/proc/self/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
        if not 0 < start < end:
            return False
        with open("/proc/self/mem", "r+b", buffering=0) as memory:
            memory.seek(start)
            block = memory.read(end - start)
            done = False
            at = block.find(entry)
            while at != -1:
                if (at == 0 or block[at - 1] == 0) and (
                    at + len(entry) == len(block) or block[at + len(entry)] == 0
                ):
                    memory.seek(start + at + len(name) + 1)
                    memory.write(b"\0" * (len(entry) - len(name) - 1))
                    done = True
                at = block.find(entry, at + 1)
            return done
    except (OSError, ValueError, IndexError):
        return False


def host_policy(
    host: str,
    *,
    public_url: str | None = None,
    allow_hosts: Sequence[str] = (),
    allow_origins: Sequence[str] = (),
) -> HostPolicy:
    """Which ``Host`` / ``Origin`` values a server bound to ``host`` accepts: on
    loopback, the loopback names and ``allow_hosts``; elsewhere, the host of
    ``public_url`` (or the bound address unless it is a wildcard), the loopback names
    and ``allow_hosts``. A wildcard bind (``0.0.0.0``, ``::``) with neither a public URL
    nor ``allow_hosts`` checks nothing (the token guards it)."""
    if is_loopback(host):
        hosts = [*allow_hosts, host]
        return HostPolicy.build(loopback=True, hosts=hosts, origins=allow_origins)
    hosts = list(allow_hosts)
    if public_url:
        public = urlsplit(public_url).hostname
        if public:
            hosts.append(public)
    elif host.strip("[]") not in ("0.0.0.0", "::"):
        hosts.append(host)
    if not hosts:
        hosts = ["*"]
    return HostPolicy.build(loopback=True, hosts=hosts, origins=allow_origins)
