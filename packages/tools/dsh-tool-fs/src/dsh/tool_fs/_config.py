"""The ``dsh-tool-fs`` plugin's config."""

from __future__ import annotations

import os
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dsh.core.permissions import SandboxConfig

__all__ = ["DEFAULT_SKIP_DIRS", "TOOL_NAMES", "FsConfig", "FsToolName"]

FsToolName = Literal["read_file", "list_dir", "glob", "grep", "write_file", "edit_file"]
TOOL_NAMES: tuple[FsToolName, ...] = get_args(FsToolName)
"""Every tool the plugin can register, in registration order."""

DEFAULT_SKIP_DIRS = (
    ".git",
    ".hg",
    ".svn",
    "node_modules",
    "__pycache__",
    ".venv",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
)
"""Directories ``glob`` and ``grep`` do not descend into (unless searched directly)."""


class FsConfig(BaseModel):
    """Config of ``dsh-tool-fs``.

    ::

        [[plugin]]
        name = "dsh-tool-fs"
        config = { tools = ["read_file", "list_dir", "glob", "grep"], max_read_bytes = 65536 }
    """

    model_config = ConfigDict(extra="forbid")

    root: str | None = None
    """The directory every path is confined to (absolute). Default: the calling agent's
    working directory (its session's ``cwd``), else the context's."""
    tools: list[FsToolName] = Field(default_factory=lambda: list(TOOL_NAMES))
    """Which tools to register (default: all six)."""
    prefix: str = Field("", pattern=r"^[A-Za-z0-9_-]*$", max_length=40)
    """Prepended to every tool name (``prefix = "fs_"`` gives ``fs_read_file``...), so
    several rows (e.g. with different roots) can coexist."""
    max_read_bytes: int = Field(128 * 1024, ge=1, le=64 * 1024 * 1024)
    """At most this many bytes of a file per ``read_file`` call; more is cut with a
    ``[truncated: ...]`` marker that says where to continue."""
    max_read_lines: int = Field(2000, ge=1)
    """Lines per ``read_file`` call when the model gives no ``limit`` (and its cap)."""
    max_output_bytes: int = Field(64 * 1024, ge=1, le=64 * 1024 * 1024)
    """Cap of the text ``list_dir``, ``glob`` and ``grep`` return (then a marker)."""
    max_results: int = Field(1000, ge=1)
    """Entries ``list_dir`` and paths ``glob`` return at most."""
    max_matches: int = Field(200, ge=1)
    """Matching lines ``grep`` returns at most (the model may ask for fewer)."""
    skip_dirs: list[str] = Field(default_factory=lambda: list(DEFAULT_SKIP_DIRS))
    """Directory names ``glob`` and ``grep`` do not descend into."""
    grep_timeout: float = Field(0.3, gt=0, le=600)
    """Seconds of regular-expression matching (CPU time) ``grep`` may spend on one file
    or line, and 20 times that in one call; a pattern that needs more (catastrophic
    backtracking) ends the call with an error. Reading files does not count."""
    allow_write: list[str] = []
    """Protected paths (``.git``, ``.dsh``, preset files) ``write_file`` and ``edit_file``
    may write anyway: absolute, or relative to the root; a directory allows what is
    below it."""
    sandbox: SandboxConfig | None = None
    """Narrows the agent's sandbox for these tools (``{ mode = "read-only" }`` refuses
    every write); it can never widen it: asking for more than the preset's ``[sandbox]``
    fails the load."""

    @field_validator("root")
    @classmethod
    def _absolute_root(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isabs(value):
            raise ValueError(f"root must be an absolute path, got {value!r}")
        return value

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, value: list[FsToolName]) -> list[FsToolName]:
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"tools lists {', '.join(repeated)} more than once")
        return value
