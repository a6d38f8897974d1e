"""Configuration of the ``claude-code`` provider."""

from __future__ import annotations

import os
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["PERMISSION_MODES", "ClaudeCodeConfig", "PermissionMode", "SettingSource"]

PermissionMode = Literal["default", "acceptEdits", "plan", "dontAsk", "bypassPermissions", "auto"]
"""Claude Code's ``--permission-mode`` values."""

PERMISSION_MODES: tuple[str, ...] = get_args(PermissionMode)

SettingSource = Literal["user", "project", "local"]


class ClaudeCodeConfig(BaseModel):
    """Config of ``dsh-subagent-claude-code`` (one row registers one provider).

    Each run is one Claude Code CLI process (the one bundled in claude-agent-sdk
    unless ``cli_path`` says otherwise) in the parent's cwd. Its environment is
    scrubbed of credentials: name what it needs in ``passthrough_env`` (e.g.
    ``ANTHROPIC_API_KEY``) or set it in ``env`` (e.g. ``ANTHROPIC_BASE_URL``).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field("claude-code", min_length=1)
    """Provider name (register several rows under different names)."""
    cli_path: str | None = None
    """The ``claude`` executable; default: the CLI bundled in the claude-agent-sdk wheel."""
    cwd: str | None = None
    """Working directory of the child; default: the parent session's cwd."""
    model: str | None = None
    """``--model``; default: the CLI's own choice."""
    permission_mode: PermissionMode = "dontAsk"
    """``--permission-mode``. ``dontAsk`` (default) denies every tool call that is
    not pre-approved by ``allowed_tools`` or the CLI's read-only rules, without
    asking. In the modes that ask (``default``, ...), every question is answered
    "deny" (an unattended child has nobody to ask)."""
    allowed_tools: list[str] = []
    """Permission rules that pre-approve tools: ``"Bash"``, ``"Bash(git:*)"``, ``"Edit"``..."""
    disallowed_tools: list[str] = []
    """Tools the child may not use at all (removed from its tool list)."""
    max_turns: int | None = Field(None, gt=0)
    """``--max-turns``: model turns before the run ends as an error."""
    system_prompt: str | None = None
    """Replace Claude Code's own system prompt; None keeps it."""
    append_system_prompt: str | None = None
    """Text appended to the system prompt."""
    setting_sources: list[SettingSource] | None = None
    """Which filesystem settings the CLI loads (``user``, ``project``, ``local``); None:
    the CLI's default (all); ``[]``: none (project settings can add allow rules and
    hooks, so use ``[]`` when the cwd is not trusted)."""
    env: dict[str, str] = {}
    """Extra environment for the CLI, on top of the scrubbed one."""
    passthrough_env: list[str] = []
    """Names of further variables the CLI inherits as they are."""
    run_timeout: float | None = Field(None, gt=0)
    """Seconds a run may take before it is stopped and settles ``error``. The CLI
    does not time out a model stream that stalls (its idle watchdog is at least
    5 minutes), so set this for unattended use. None: no limit."""
    term_grace: float = Field(0.3, ge=0)
    """Teardown: seconds between SIGTERM (the CLI then stops its tool processes)
    and SIGKILL of whatever is left."""
    exit_grace: float = Field(2.0, ge=0)
    """After the result: seconds the CLI gets to exit on its own before teardown."""

    @field_validator("cli_path", "cwd")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is None:
            return None
        expanded = os.path.expanduser(value)
        if not os.path.isabs(expanded):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return expanded

    @field_validator("allowed_tools", "disallowed_tools")
    @classmethod
    def _no_blank_rules(cls, value: list[str]) -> list[str]:
        for rule in value:
            if not rule.strip() or ("," in rule and "(" not in rule):
                raise ValueError(
                    f"tool rule {rule!r} is blank or holds a comma; give one rule per list item"
                )
        return value
