"""The CLI's command line and environment, built from the config.

The same flags claude-agent-sdk's own subprocess transport passes for these
options (SDK 0.2.189), built here so the provider owns the process (environment,
session, teardown) and depends on no private SDK function.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from collections.abc import Mapping

from dsh.subagent import SubagentError
from dsh.subagent.out_of_process import scrubbed_env
from dsh.subagent_claude_code.config import ClaudeCodeConfig

__all__ = ["DEFAULT_ENV", "bundled_cli", "child_env", "cli_argv", "resolve_cli", "sdk_version"]

DEFAULT_ENV: Mapping[str, str] = {"DISABLE_AUTOUPDATER": "1"}
"""Set for every run unless the config's ``env`` overrides it: the bundled CLI must
not update itself under a pinned SDK."""


def sdk_version() -> str:
    """The installed claude-agent-sdk version (read from its metadata, not by importing it)."""
    try:
        return importlib.metadata.version("claude-agent-sdk")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def bundled_cli() -> str | None:
    """The CLI inside the installed claude-agent-sdk wheel, if there is one."""
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = os.path.join(location, "_bundled", "claude")
        if os.path.isfile(candidate):
            return candidate
    return None


def resolve_cli(config: ClaudeCodeConfig) -> str:
    """The executable to run: ``cli_path``, else the bundled CLI; checked."""
    path = config.cli_path or bundled_cli()
    if path is None:
        raise SubagentError(
            f"{config.name} provider: no Claude Code CLI found: the claude-agent-sdk wheel for"
            " this platform bundles one (reinstall claude-agent-sdk), or set cli_path",
            "START_FAILED",
        )
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise SubagentError(
            f"{config.name} provider: cli_path {path!r} is not an executable file",
            "START_FAILED",
        )
    return path


def cli_argv(config: ClaudeCodeConfig, cli: str, *, permission_prompts: bool) -> list[str]:
    """The CLI's argv: stream-json both ways, the config's flags.

    ``permission_prompts`` routes the CLI's permission questions to the SDK over
    stdio (``--permission-prompt-tool stdio``), where the deny callback answers.
    """
    argv = [cli, "--output-format", "stream-json", "--verbose"]
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
    if permission_prompts:
        argv += ["--permission-prompt-tool", "stdio"]
    argv += ["--permission-mode", config.permission_mode]
    if config.setting_sources is not None:
        argv.append(f"--setting-sources={','.join(config.setting_sources)}")
    argv += ["--input-format", "stream-json"]
    return argv


def child_env(config: ClaudeCodeConfig, cwd: str) -> dict[str, str]:
    """The CLI's whole environment: scrubbed, defaults, the config, the SDK's markers.

    Nothing else of this process's environment reaches the CLI.
    """
    base = scrubbed_env(passthrough=config.passthrough_env)
    env = {**base, **DEFAULT_ENV, **config.env}
    # What the SDK's transport sets: the entrypoint the CLI reports, the SDK
    # version, and the session-state frames the SDK uses to tell the run is over.
    env.setdefault("CLAUDE_CODE_ENTRYPOINT", "sdk-py")
    env["CLAUDE_AGENT_SDK_VERSION"] = sdk_version()
    env.setdefault("CLAUDE_CODE_SDK_READS_SESSION_STATE", "1")
    env["PWD"] = cwd
    env.pop("CLAUDECODE", None)  # the child is not running inside a Claude Code parent
    return env
