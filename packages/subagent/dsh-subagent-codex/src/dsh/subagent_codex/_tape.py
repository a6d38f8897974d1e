"""Codex's model traffic through the run's tape (``DSH_TAPE_PROXY``, when one is active).

Codex takes its model endpoint from its configuration, so the provider works out the
model provider codex will use and its base URL — ``model_provider`` of the row, else
of ``config_overrides``, else of ``$CODEX_HOME/config.toml``, else the built-in
``openai`` — and adds one ``-c`` override that routes it through the proxy
(:func:`dsh.subagent.kit.taped_url`): ``model_providers.<id>.base_url`` for a provider
of the configuration, ``openai_base_url`` for the built-in ``openai`` (its base URL:
``openai_base_url``, else ``OPENAI_BASE_URL``, else the public API). Other built-in
providers (``oss``, ``ollama``, ``lmstudio``), a profile's provider and a ChatGPT
login are not routed.
"""

from __future__ import annotations

import logging
import os
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from dsh.subagent.kit import TAPE_PROXY_VARIABLE, taped_url
from dsh.subagent_codex._config import CodexConfig, toml_value

__all__ = ["OPENAI_API", "TAPE_LABEL", "codex_argv"]

_log = logging.getLogger("dsh.subagent_codex")

TAPE_LABEL = "codex"
"""The label of codex's model calls on a tape."""
OPENAI_API = "https://api.openai.com/v1"
"""The built-in ``openai`` provider's base URL when nothing names another."""
_UNROUTED = frozenset({"oss", "ollama", "lmstudio"})
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def codex_argv(config: CodexConfig, env: Mapping[str, str]) -> list[str]:
    """The app-server's argv (:attr:`CodexConfig.argv`) for a child with environment
    ``env``: with the model provider's base URL routed through the tape ``env`` names,
    if it names one."""
    argv = config.argv
    override = _tape_override(config, env)
    return argv if override is None else [*argv, "-c", override]


def _tape_override(config: CodexConfig, env: Mapping[str, str]) -> str | None:
    if not (env.get(TAPE_PROXY_VARIABLE) or "").strip():
        return None  # no tape
    settings = _settings(config, env)
    provider = config.model_provider or settings.get("model_provider") or "openai"
    providers = settings.get("model_providers")
    table = providers.get(provider) if isinstance(providers, Mapping) else None
    if isinstance(table, Mapping) and isinstance(table.get("base_url"), str):
        if not _BARE_KEY.fullmatch(str(provider)):  # codex's -c takes no quoted keys
            _log.warning("codex model provider %r: not on the tape (not a bare key)", provider)
            return None
        key = f"model_providers.{provider}.base_url"
        upstream = str(table["base_url"])
    elif provider == "openai":
        key = "openai_base_url"
        named = settings.get("openai_base_url")
        if not isinstance(named, str) or not named:
            named = env.get("OPENAI_BASE_URL") or OPENAI_API
        upstream = named
    else:
        if provider not in _UNROUTED:
            _log.warning("codex model provider %r has no base_url: not on the tape", provider)
        return None
    return f"{key}={toml_value(taped_url(upstream, TAPE_LABEL, env))}"


def _settings(config: CodexConfig, env: Mapping[str, str]) -> dict[str, Any]:
    """codex's configuration as far as it matters here: ``config.toml`` of its home,
    with ``config_overrides`` (dotted keys) on top."""
    home = config.codex_home or env.get("CODEX_HOME")
    if home is None:
        home = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".codex")
    settings: dict[str, Any] = {}
    try:
        with open(os.path.join(home, "config.toml"), "rb") as file:
            settings = tomllib.load(file)
    except FileNotFoundError:
        pass
    except (OSError, tomllib.TOMLDecodeError) as exc:
        _log.warning("cannot read codex's config.toml in %s (%s): tape routing guesses", home, exc)
    for dotted, value in config.config_overrides.items():
        *parents, last = dotted.split(".")
        table = settings
        for part in parents:
            inner = table.get(part)
            if not isinstance(inner, dict):
                inner = table[part] = {}
            table = inner
        table[last] = value
    return settings
