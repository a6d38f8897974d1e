"""The ``dsh-tool-fs`` plugin: registers the enabled file tools."""

from __future__ import annotations

from dsh.core import Context, EffectScope, Plugin
from dsh.tool_fs._config import FsConfig
from dsh.tool_fs._paths import Root
from dsh.tool_fs._tools import fs_tools

__all__ = ["plugin"]


def apply(ctx: Context, config: FsConfig, effects: EffectScope) -> None:
    """Register file tools confined to the agent's working directory."""
    if config.root is not None:
        Root(config.root)  # a configured root must exist: fail the load, not every call
    what = f"the dsh-tool-fs row{f' (prefix {config.prefix!r})' if config.prefix else ''}"
    ctx.sandbox.narrowed(config.sandbox, what=what)  # never wider than the preset's
    for tool in fs_tools(config):
        effects.add(ctx.tools.register(tool))


plugin = Plugin("dsh-tool-fs", apply, FsConfig)
