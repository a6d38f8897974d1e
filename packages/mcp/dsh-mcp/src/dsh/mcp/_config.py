"""The ``dsh-mcp`` preset row: what ``dsh mcp`` serves besides the subagent tools.

::

    [[plugin]]
    name = "dsh-mcp"
    config = { expose = ["read_file"], max_depth = 3 }

A preset without the row serves its ``dsh-tool-subagent`` rows only, under the
default ceiling. A name in ``expose`` that is no tool of the preset once it has
loaded fails the load, naming the row.
"""

from __future__ import annotations

import weakref

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import Context, DshError, EffectScope, Plugin
from dsh.subagent.kit import DEFAULT_MAX_DEPTH

__all__ = ["McpServeConfig", "McpServeError", "plugin", "serve_config"]

_configs: weakref.WeakKeyDictionary[Context, McpServeConfig] = weakref.WeakKeyDictionary()


class McpServeError(DshError, ValueError):
    """The ``dsh-mcp`` row names a tool the preset does not have."""


class McpServeConfig(BaseModel):
    """Config of ``dsh-mcp``: what ``dsh mcp`` exposes, and the depth ceiling for
    callers that are not dsh."""

    model_config = ConfigDict(extra="forbid")

    expose: list[str] = []
    """Tools of the preset served as MCP tools too, by name (the ``dsh-tool-subagent``
    rows' tools always are; no other tool is unless listed here)."""
    max_depth: int = Field(DEFAULT_MAX_DEPTH, ge=0, strict=True)
    """The delegation depth limit of a call whose ``_meta`` carries no dsh lineage (an
    MCP client that is not dsh): its child runs at depth 1 under this limit."""


def serve_config(ctx: Context) -> McpServeConfig:
    """The ``dsh-mcp`` row's config of ``ctx`` (the defaults without the row)."""
    return _configs.get(ctx) or McpServeConfig()


def _apply(ctx: Context, config: McpServeConfig, effects: EffectScope) -> None:
    if ctx in _configs:
        raise McpServeError("a preset has one dsh-mcp row at most")
    _configs[ctx] = config

    def forget() -> None:
        _configs.pop(ctx, None)

    effects.add(forget)

    def check() -> None:
        missing = [name for name in config.expose if name not in ctx.tools]
        if missing:
            have = ", ".join(sorted(ctx.tools.names())) or "none"
            raise McpServeError(
                f"expose names tools the preset does not have: {', '.join(missing)}"
                f" (its tools: {have})"
            )

    effects.after_load(check)


plugin = Plugin("dsh-mcp", _apply, McpServeConfig)
"""The ``dsh-mcp`` row (its config: :class:`McpServeConfig`)."""
