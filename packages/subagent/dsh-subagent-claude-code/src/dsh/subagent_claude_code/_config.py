"""Configuration of the ``claude-code`` provider."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from dsh.subprocess import SubprocessConfig

__all__ = ["ClaudeCodeConfig", "PermissionMode", "SettingSource"]

PermissionMode = Literal["default", "acceptEdits", "plan", "dontAsk", "bypassPermissions", "auto"]
"""Claude Code's ``--permission-mode`` values."""

SettingSource = Literal["user", "project", "local"]

_OWN_FLAGS = ("--input-format", "--output-format", "--permission-prompt-tool", "--print", "-p")
_RENAMED = {"cli_path": "command", "run_timeout": "turn_timeout", "exit_grace": "eof_grace"}


class ClaudeCodeConfig(SubprocessConfig):
    """Config of ``dsh-subagent-claude-code`` (one row registers one provider).

    Each run is one Claude Code CLI process (the one bundled in claude-agent-sdk
    unless ``command`` says otherwise) in the parent's cwd. Its environment is
    scrubbed of credentials: name what it needs in ``passthrough_env`` (e.g.
    ``ANTHROPIC_API_KEY``) or set it in ``env`` (e.g. ``ANTHROPIC_BASE_URL``).
    ``cwd``, ``env``, ``passthrough_env`` and the timeouts (``start_timeout``,
    ``turn_timeout``: 900 s) are :class:`~dsh.subprocess.SubprocessConfig`'s.
    """

    name: str = Field("claude-code", min_length=1)
    """Provider name (register several rows under different names)."""
    command: str | None = Field(None, min_length=1)
    """The ``claude`` executable: an absolute path, or a name looked up on the child's
    ``PATH``; default: the CLI bundled in the claude-agent-sdk wheel."""
    args: list[str] = []
    """Extra CLI arguments, after the provider's own (not the wire-format flags
    ``--input-format``, ``--output-format``, ``--permission-prompt-tool``, ``--print``)."""
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
    eof_grace: float = Field(2.0, ge=0)
    """Teardown after the CLI answered: seconds it gets to exit on stdin EOF (it does
    when idle) before SIGTERM. A run stopped mid-turn skips it: the CLI ignores stdin
    EOF while it works."""
    term_grace: float = Field(0.3, ge=0)
    """Teardown: seconds between SIGTERM (the CLI then stops its tool processes)
    and SIGKILL of whatever is left."""
    cancel_grace: float = Field(2.0, ge=0)
    """Seconds a cancelled (or timed-out) CLI gets to end its turn after the interrupt
    request (it takes tens of milliseconds) before it is stopped anyway."""

    def writable_state(self, env: Mapping[str, str]) -> list[str]:
        """``state_dirs`` and the CLI's own: its config directory (``CLAUDE_CONFIG_DIR``,
        else ``$HOME/.claude``: sessions, todos, settings) and ``CLAUDE_CODE_TMPDIR`` when
        set (else its temporary files go to the sandbox's private ``TMPDIR``)."""
        home = env.get("HOME") or os.path.expanduser("~")
        dirs = [env.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude")]
        if env.get("CLAUDE_CODE_TMPDIR"):
            dirs.append(env["CLAUDE_CODE_TMPDIR"])
        return [*super().writable_state(env), *dirs]

    @model_validator(mode="before")
    @classmethod
    def _renamed_fields(cls, data: Any) -> Any:
        for old, new in _RENAMED.items():
            if isinstance(data, dict) and old in data:
                raise ValueError(f"{old} was renamed {new}")
        return data

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        value = os.path.expanduser(value) if value is not None else None
        if value is not None and os.sep in value and not os.path.isabs(value):
            raise ValueError(f"must be an absolute path or a name looked up on PATH: {value!r}")
        return value

    @field_validator("args")
    @classmethod
    def _own_flags(cls, value: list[str]) -> list[str]:
        for flag in (arg.split("=", 1)[0] for arg in value):
            if flag in _OWN_FLAGS:
                raise ValueError(f"args must not set {flag}: the provider sets it")
        return value

    @field_validator("allowed_tools", "disallowed_tools")
    @classmethod
    def _no_blank_rules(cls, value: list[str]) -> list[str]:
        for rule in value:
            if not rule.strip() or ("," in rule and "(" not in rule):
                raise ValueError(
                    f"tool rule {rule!r} is blank or holds a comma; give one rule per list item"
                )
        return value
