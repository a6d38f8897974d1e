"""The CLI's command line and environment, built from the config (no SDK import).

The same flags claude-agent-sdk's own subprocess transport passes for these
options (SDK 0.2.189), built here so the provider owns the process.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

from dsh.subagent import StartFailed
from dsh.subagent.kit import taped_url
from dsh.subagent_claude_code._config import ClaudeCodeConfig

__all__ = [
    "ANTHROPIC_API",
    "TAPE_LABEL",
    "asks_for_permission",
    "bundled_cli",
    "cli_argv",
    "env_defaults",
    "resolve_cli",
    "through_tape",
]

ANTHROPIC_API = "https://api.anthropic.com"
"""The CLI's model API when ``ANTHROPIC_BASE_URL`` does not name another."""
TAPE_LABEL = "claude-code"
"""The label of the CLI's model calls on a tape."""


def bundled_cli() -> str | None:
    """The CLI inside the installed claude-agent-sdk wheel, if there is one."""
    spec = importlib.util.find_spec("claude_agent_sdk")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(location, "_bundled", "claude")
        if os.path.isfile(candidate):
            return candidate
    return None


def resolve_cli(config: ClaudeCodeConfig) -> str:
    """The executable to run: ``command``, else the bundled CLI."""
    path = config.command or bundled_cli()
    if path is None:
        raise StartFailed(
            f"{config.name} provider: no Claude Code CLI found: the claude-agent-sdk wheel for"
            " this platform bundles one (reinstall claude-agent-sdk), or set command"
        )
    return path


def asks_for_permission(config: ClaudeCodeConfig) -> bool:
    """Whether the CLI asks before a tool call in the config's mode (and so consults
    the deny callback). ``dontAsk`` denies by itself and ``bypassPermissions`` allows."""
    return config.permission_mode not in ("dontAsk", "bypassPermissions")


def cli_argv(config: ClaudeCodeConfig, cli: str) -> list[str]:
    """The CLI's argv: stream-json both ways with partial messages, the config's flags,
    then its ``args``. In a mode that asks, permission questions go to the SDK over
    stdio (``--permission-prompt-tool stdio``), where the deny callback answers."""
    argv = [cli, "--output-format", "stream-json", "--verbose", "--include-partial-messages"]
    if config.system_prompt is not None:
        argv += ["--system-prompt", config.system_prompt]
    if config.append_system_prompt is not None:
        argv += ["--append-system-prompt", config.append_system_prompt]
    if config.allowed_tools:
        argv += ["--allowedTools", ",".join(config.allowed_tools)]
    if config.max_turns is not None:
        argv += ["--max-turns", str(config.max_turns)]
    if config.disallowed_tools:
        argv += ["--disallowedTools", ",".join(config.disallowed_tools)]
    if config.model:
        argv += ["--model", config.model]
    if asks_for_permission(config):
        argv += ["--permission-prompt-tool", "stdio"]
    argv += ["--permission-mode", config.permission_mode]
    if config.setting_sources is not None:
        argv.append(f"--setting-sources={','.join(config.setting_sources)}")
    return [*argv, "--input-format", "stream-json", *config.args]


def env_defaults() -> dict[str, str]:
    """What the CLI's environment gets below the config's ``env``: no self-update under
    a pinned SDK, and what the SDK's own transport sets (the entrypoint and SDK version
    the CLI reports, the session-state frames the SDK uses to tell the run is over)."""
    try:
        version = importlib.metadata.version("claude-agent-sdk")  # without importing it
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_ENTRYPOINT": "sdk-py",
        "CLAUDE_AGENT_SDK_VERSION": version,
        "CLAUDE_CODE_SDK_READS_SESSION_STATE": "1",
    }


def through_tape(env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``ANTHROPIC_BASE_URL`` routed through the run's tape proxy when
    ``env`` names one (``DSH_TAPE_PROXY``, see :func:`dsh.subagent.kit.taped_url`);
    changed in place and returned."""
    upstream = env.get("ANTHROPIC_BASE_URL") or ANTHROPIC_API
    taped = taped_url(upstream, TAPE_LABEL, env)
    if taped != upstream:
        env["ANTHROPIC_BASE_URL"] = taped
    return env
