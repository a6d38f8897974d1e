"""Environments that point the real products at a fake model server, offline.

Everything a product writes (config, caches, temp files) stays under ``root``.
"""

from __future__ import annotations

import json
import os

from dsh.testing.model_servers._gemini import GEMINI_MODEL

__all__ = ["claude_code_env", "codex_offline_env", "gemini_cli_env"]

_CODEX_CONFIG = """\
model = "gpt-5.5"
model_provider = "fake"

[model_providers.fake]
name = "Fake Responses API"
base_url = "{base_url}"
env_key = "FAKE_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[features]
plugins = false
apps = false
remote_plugin = false
"""


def claude_code_env(base_url: str, root: str | os.PathLike[str]) -> dict[str, str]:
    """Environment that runs the Claude Code CLI offline against the server at ``base_url``.

    The CLI's home, config and temp folders are created under ``root``, so it
    writes nothing elsewhere; no telemetry, no update checks, no retries (an HTTP
    error fails at once), no request but ``POST /v1/messages``.
    """
    folders = {name: os.path.join(root, name) for name in ("home", "config", "tmp")}
    for folder in folders.values():
        os.makedirs(folder, exist_ok=True)
    return {
        "ANTHROPIC_BASE_URL": base_url,  # no /v1: the CLI appends it
        "ANTHROPIC_API_KEY": "fake-key",
        "HOME": folders["home"],
        "CLAUDE_CONFIG_DIR": folders["config"],
        "CLAUDE_CODE_TMPDIR": folders["tmp"],  # else claude-<uid>/ and cc-socks/ in /tmp
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # else HEAD /api/hello, a title request
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",  # else an HTTP 500 is retried for minutes
    }


def codex_offline_env(base_url: str, root: str | os.PathLike[str]) -> dict[str, str]:
    """Environment that runs the Codex CLI offline against the server at ``base_url``
    (its :attr:`~OpenAIResponsesServer.api_base`, ending in ``/v1``).

    Creates under ``root``: ``home/`` (``HOME``), ``home/.codex/`` (``CODEX_HOME``)
    with a ``config.toml`` whose model provider ``fake`` is the server (no retries,
    no analytics, no plugin or app features: codex connects to nothing else), and
    ``tmp/``, a private ``TMPDIR`` that does not contain ``CODEX_HOME`` (else codex
    warns). The key codex sends is ``FAKE_API_KEY``'s, ``fake-key``.
    """
    home = os.path.join(root, "home")
    codex_home = os.path.join(home, ".codex")
    tmp = os.path.join(root, "tmp")
    for folder in (codex_home, tmp):
        os.makedirs(folder, exist_ok=True)
    with open(os.path.join(codex_home, "config.toml"), "w", encoding="utf-8") as config:
        config.write(_CODEX_CONFIG.format(base_url=base_url))
    return {"CODEX_HOME": codex_home, "HOME": home, "TMPDIR": tmp, "FAKE_API_KEY": "fake-key"}


GEMINI_CLI_SETTINGS: dict[str, object] = {
    "model": {"name": GEMINI_MODEL},  # not "auto": no routing request to a classifier model
    "general": {"maxAttempts": 1, "enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},  # else Clearcut logging
    "telemetry": {"enabled": False},
    "ide": {"enabled": False},
    "tools": {"useRipgrep": False},
}
"""What :func:`gemini_cli_env` writes to the CLI's ``settings.json``."""


def gemini_cli_env(base_url: str, root: str | os.PathLike[str]) -> dict[str, str]:
    """Environment that runs the Gemini CLI offline against the server at ``base_url``
    (a :class:`~dsh.testing.model_servers.GeminiServer`'s ``api_base``).

    Creates under ``root``: ``home/`` (``HOME`` and ``GEMINI_CLI_HOME``) with
    ``home/.gemini/settings.json`` (:data:`GEMINI_CLI_SETTINGS`: a fixed model, so no
    routing request; one attempt per request; no usage statistics, telemetry, update
    check, IDE or ripgrep download), and ``tmp/`` (``TMPDIR``).
    ``GOOGLE_GEMINI_BASE_URL`` makes the CLI authenticate as a gateway with
    ``GEMINI_API_KEY`` (``fake-key``), no auth dialog. ``GEMINI_CLI_NO_RELAUNCH``: the
    CLI runs in the process started, not in a child it relaunches with more heap.
    """
    home = os.path.join(root, "home")
    tmp = os.path.join(root, "tmp")
    for folder in (os.path.join(home, ".gemini"), tmp):
        os.makedirs(folder, exist_ok=True)
    with open(os.path.join(home, ".gemini", "settings.json"), "w", encoding="utf-8") as out:
        json.dump(GEMINI_CLI_SETTINGS, out, indent=2)
    return {
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_API_KEY": "fake-key",
        "HOME": home,
        "GEMINI_CLI_HOME": home,
        "TMPDIR": tmp,
        "GEMINI_CLI_NO_RELAUNCH": "1",
        "NO_COLOR": "1",
    }
