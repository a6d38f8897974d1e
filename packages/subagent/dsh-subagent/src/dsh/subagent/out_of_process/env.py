"""Credential-scrubbed environments for child processes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["SAFE_ENV_NAMES", "SAFE_ENV_PREFIXES", "scrubbed_env"]

SAFE_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "TMPDIR",
        "TMP",
        "TEMP",
        "NO_PROXY",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "NODE_EXTRA_CA_CERTS",
        "SYSTEMROOT",
    }
)
"""Variables a child inherits. Everything else (API keys, tokens, proxies with
passwords, cloud credentials) is dropped unless configured explicitly."""

SAFE_ENV_PREFIXES = ("LC_", "XDG_")


def scrubbed_env(
    extra: Mapping[str, str] | None = None,
    *,
    base: Mapping[str, str] | None = None,
    passthrough: Iterable[str] = (),
) -> dict[str, str]:
    """An allow-listed copy of ``base`` (default ``os.environ``) with ``extra`` on top.

    ``passthrough`` names further variables to inherit as they are.
    """
    source = os.environ if base is None else base
    keep = SAFE_ENV_NAMES | frozenset(passthrough)
    env = {
        name: value
        for name, value in source.items()
        if name in keep or name.startswith(SAFE_ENV_PREFIXES)
    }
    if extra:
        for name, value in extra.items():
            if not isinstance(value, str):
                raise TypeError(f"env value for {name!r} must be a string, got {value!r}")
            env[name] = value
    return env
