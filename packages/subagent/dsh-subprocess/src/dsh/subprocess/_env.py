"""Credential-scrubbed environments for child processes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Annotated, TypeVar

from pydantic import AfterValidator

__all__ = [
    "SAFE_ENV_NAMES",
    "EnvNames",
    "EnvVariables",
    "check_env_name",
    "env_from_pairs",
    "scrubbed_env",
]

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
        "COLORTERM",
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
        # locale categories (not every LC_* name: LC_ is a prefix anyone can use)
        "LC_ALL",
        "LC_CTYPE",
        "LC_COLLATE",
        "LC_MESSAGES",
        "LC_MONETARY",
        "LC_NUMERIC",
        "LC_TIME",
        "LC_ADDRESS",
        "LC_IDENTIFICATION",
        "LC_MEASUREMENT",
        "LC_NAME",
        "LC_PAPER",
        "LC_TELEPHONE",
        # XDG base directories (not every XDG_* name)
        "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_DIRS",
        "XDG_DATA_DIRS",
    }
)
"""Variables a child inherits. Everything else (API keys, tokens, proxies with
passwords, cloud credentials) is dropped unless configured explicitly."""


def check_env_name(name: str) -> str:
    """``name`` if it can be an environment variable name; else ``ValueError``."""
    if not name or "=" in name or "\0" in name:
        raise ValueError(f"invalid environment variable name {name!r}")
    return name


_Names = TypeVar("_Names", list[str], dict[str, str])


def _check_names(value: _Names) -> _Names:
    for name in value:  # a list's items, a dict's keys
        check_env_name(name)
    return value


EnvNames = Annotated[list[str], AfterValidator(_check_names)]
"""A config field of variable names (``passthrough_env``): each one checked."""

EnvVariables = Annotated[dict[str, str], AfterValidator(_check_names)]
"""A config field of variables to set (``env``): each name checked."""


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
    env = {name: value for name, value in source.items() if name in keep}
    if extra:
        for name, value in extra.items():
            if not isinstance(value, str):
                raise TypeError(f"env value for {name!r} must be a string, got {value!r}")
            env[name] = value
    return env


def env_from_pairs(value: object) -> dict[str, str]:
    """ACP's environment list, ``[{"name": ..., "value": ...}]`` (``terminal/create``,
    MCP server rows), as a dict; ``ValueError`` saying what is not such a list
    ("must be a list of {name, value} objects, got ...")."""
    if not isinstance(value, list):
        raise ValueError(f"must be a list of {{name, value}} objects, got {value!r}")
    pairs: dict[str, str] = {}
    for item in value:
        name = item.get("name") if isinstance(item, Mapping) else None
        text = item.get("value") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not isinstance(text, str):
            raise ValueError(f"must be a list of {{name, value}} objects, got {item!r}")
        pairs[name] = text
    return pairs
