"""Configuration of the codex provider, and what each permission mode means."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from dsh.core.permissions import SandboxPolicy
from dsh.subprocess import PoolConfig, SubprocessConfig

__all__ = [
    "PERMISSION_MODES",
    "CodexConfig",
    "CodexPoolConfig",
    "PermissionMode",
    "PermissionSettings",
    "toml_value",
]

PermissionMode = Literal["read-only", "workspace-write", "auto-approve", "full-access"]


@dataclass(frozen=True, slots=True)
class PermissionSettings:
    """What a permission mode sends in ``thread/start`` and how approvals are answered."""

    sandbox: str
    """``thread/start.sandbox``: ``read-only`` / ``workspace-write`` / ``danger-full-access``."""
    approval_policy: str
    """``thread/start.approvalPolicy``: when codex asks before running something."""
    approve: bool
    """Accept approval requests (True) or decline them (False)."""


PERMISSION_MODES: Mapping[str, PermissionSettings] = {
    # Commands run in codex's read-only sandbox; a request to go beyond it is declined.
    "read-only": PermissionSettings("read-only", "on-request", approve=False),
    # Commands may write inside the workspace (cwd); a request to go beyond it is declined.
    "workspace-write": PermissionSettings("workspace-write", "on-request", approve=False),
    # Workspace sandbox, and every request to go beyond it is accepted.
    "auto-approve": PermissionSettings("workspace-write", "on-request", approve=True),
    # No sandbox and no approvals (codex's --dangerously-bypass-approvals-and-sandbox).
    "full-access": PermissionSettings("danger-full-access", "never", approve=True),
}
"""``permission_mode`` → sandbox, approval policy and the answer to approval requests."""

_RENAMED = {"startup_timeout": "start_timeout"}
_CODEX_WIDTH = {"read-only": 0, "workspace-write": 1, "danger-full-access": 2}
"""codex's sandbox modes, narrowest first (dsh's mode names are codex's)."""


class CodexPoolConfig(PoolConfig):
    """``pool = { size = 1, max_runs = 50, idle_timeout = 300, concurrency = 1 }``."""

    concurrency: int = Field(1, ge=1, le=64)
    """Runs at once on one app-server, one thread each (codex tells their messages
    apart by thread id). A crash of the app-server fails every run on it."""


class CodexConfig(SubprocessConfig):
    """Config of ``dsh-subagent-codex`` (one row registers one provider).

    The child is ``<command> <args...> app-server [--strict-config] [-c key=value ...]``.
    Which model and model provider codex uses comes from ``$CODEX_HOME/config.toml``
    (``codex_home``, else ``~/.codex``), ``config_overrides`` (``-c``), or ``model`` /
    ``model_provider`` here. The child's environment is scrubbed of credentials:
    name the variables it needs in ``passthrough_env`` (e.g. ``OPENAI_API_KEY``) or
    set them in ``env``. ``cwd``, ``env``, ``passthrough_env``, ``start_timeout``,
    ``turn_timeout`` (default 900 s), ``cancel_grace``, ``eof_grace`` and
    ``term_grace`` are the provider kit's (:class:`~dsh.subprocess.SubprocessConfig`).
    """

    name: str = Field("codex", min_length=1)
    """Provider name (register several rows under different names)."""
    command: str = Field("codex", min_length=1)
    """The codex executable; ``args`` go between it and ``app-server``."""
    cancel_grace: float = Field(0.5, ge=0)
    """Seconds codex gets to end a turn after ``turn/interrupt`` (it takes 3–105 ms)."""
    strict_config: bool = True
    """Pass ``--strict-config``: a bad config.toml fails the start instead of codex
    silently falling back to its defaults."""
    config_overrides: dict[str, Any] = {}
    """``-c key=value`` overrides (values written as TOML), e.g.
    ``{"model_providers.openai.request_max_retries" = 0}``."""
    codex_home: str | None = None
    """``CODEX_HOME`` for the child (absolute; created if missing). Unset: codex uses
    ``$CODEX_HOME`` from ``env``, else ``~/.codex``."""
    model: str | None = None
    """Model for the thread (``thread/start.model``); default: config.toml's."""
    model_provider: str | None = None
    """Model provider id for the thread (``thread/start.modelProvider``)."""
    permission_mode: PermissionMode = "read-only"
    """Sandbox and approval answers: ``read-only`` (default), ``workspace-write``,
    ``auto-approve`` or ``full-access`` (see :data:`PERMISSION_MODES`)."""
    pool: CodexPoolConfig = CodexPoolConfig()
    """Warm app-servers, e.g. ``{ size = 1, max_runs = 50, idle_timeout = 300 }``: a run
    then takes a handshaken app-server and starts its own thread on it. Off by default
    (``size = 0``): runs on one app-server share its process, its configuration and
    auth as read at its start, and its caches; see the docs."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for old, new in _RENAMED.items():
                if old in data:
                    raise ValueError(f"{old} was renamed {new}")
        return data

    @field_validator("command", mode="before")
    @classmethod
    def _one_executable(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            raise ValueError("command is one executable; put further arguments in args")
        if isinstance(value, str) and value and not value.strip():
            raise ValueError("command must name the codex executable, got a blank string")
        return value

    @field_validator("codex_home")
    @classmethod
    def _absolute_home(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isabs(os.path.expanduser(value)):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return os.path.expanduser(value) if value is not None else None

    @field_validator("config_overrides")
    @classmethod
    def _overrides_encodable(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, item in value.items():
            if not key or any(c.isspace() for c in key) or "=" in key:
                raise ValueError(f"config_overrides key {key!r} is not a dotted TOML key")
            toml_value(item)  # raises for values TOML cannot hold
        return value

    def writable_state(self, env: Mapping[str, str]) -> list[str]:
        """``state_dirs``, codex's home (``CODEX_HOME``: ``codex_home``, else the child's
        ``$CODEX_HOME``, else ``$HOME/.codex``: its sessions, logs and caches) and
        ``/tmp/codex-daemon-<uid>``, where codex's own command sandbox keeps its state
        (a fixed path: the sandbox's ``/tmp`` is read-only otherwise)."""
        home = self.codex_home or env.get("CODEX_HOME")
        if home is None:
            home = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".codex")
        daemon = f"/tmp/codex-daemon-{os.getuid()}"
        return [*super().writable_state(env), home, daemon]

    def sandbox_settings(self, policy: SandboxPolicy, cwd: str) -> dict[str, Any]:
        """What ``thread/start`` carries for the sandbox ``policy`` (the agent's, which
        codex's own sandbox then applies to its commands): ``sandbox``, the narrower of
        :attr:`permission_mode`'s and the policy's mode, and in ``config`` the policy's
        network and writable roots for ``workspace-write`` (``/tmp`` left out)."""
        sandbox = self.permissions.sandbox
        if policy.enabled and _CODEX_WIDTH[sandbox] > _CODEX_WIDTH[policy.mode]:
            sandbox = policy.mode
        settings: dict[str, Any] = {"sandbox": sandbox}
        if policy.enabled and sandbox == "workspace-write":
            roots = [d for d in policy.writable_dirs(cwd) if d != os.path.realpath(cwd)]
            settings["config"] = {
                "sandbox_workspace_write.network_access": policy.network,
                "sandbox_workspace_write.writable_roots": roots,
                # /tmp is read-only in dsh's sandbox (TMPDIR is its private one)
                "sandbox_workspace_write.exclude_slash_tmp": True,
            }
        return settings

    @property
    def permissions(self) -> PermissionSettings:
        """The settings of :attr:`permission_mode`."""
        return PERMISSION_MODES[self.permission_mode]

    @property
    def argv(self) -> list[str]:
        """The child's command line."""
        argv = [self.command, *self.args, "app-server"]
        if self.strict_config:
            argv.append("--strict-config")
        for key, item in self.config_overrides.items():
            argv += ["-c", f"{key}={toml_value(item)}"]
        return argv


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (strings, numbers, booleans, arrays, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"TOML cannot hold {value!r} in config_overrides")
        return repr(value)
    if isinstance(value, str):
        # A JSON string (non-ASCII kept literal) is a valid TOML basic string, but for DEL.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        pairs = (f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    raise ValueError(f"TOML cannot hold a {type(value).__name__} in config_overrides")
