"""The ``dsh-tool-shell`` plugin: registers the shell tool."""

from __future__ import annotations

import os

from dsh.core import Context, EffectScope, Plugin
from dsh.tool_shell._config import ShellConfig
from dsh.tool_shell._tool import shell_tool

__all__ = ["plugin"]


def apply(ctx: Context, config: ShellConfig, effects: EffectScope) -> None:
    """Register a shell tool that runs commands in the agent's working directory."""
    if config.cwd is not None and not os.path.isdir(config.cwd):
        raise ValueError(f"cwd {config.cwd!r} is not a directory")
    ctx.sandbox.narrowed(config.sandbox, what=f'the "{config.tool_name}" tool')  # never wider
    effects.add(ctx.tools.register(shell_tool(config)))


plugin = Plugin("dsh-tool-shell", apply, ShellConfig)
