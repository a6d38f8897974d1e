"""What ``dsh mcp`` was asked to do: its command-line options."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ServeOptions"]


@dataclass
class ServeOptions:
    """What ``dsh mcp`` was asked to do (its command-line options)."""

    preset: str | None = None
    trust: bool = False
    """Use the working directory's ``dsh.toml`` without it being trusted (``--trust``)."""
    name: str | None = None
    sessions_dir: str | None = None
    max_line_bytes: int = 16 * 1024 * 1024
    log_level: str = "warning"
    http: bool = False
    host: str = "127.0.0.1"
    port: int = 8000
    token_envs: list[str] = field(default_factory=list)
    allow_hosts: list[str] = field(default_factory=list)
    allow_origins: list[str] = field(default_factory=list)
