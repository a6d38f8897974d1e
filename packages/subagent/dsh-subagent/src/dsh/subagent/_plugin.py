"""The ``dsh-subagent`` plugin: installs ``ctx.subagents``.

Optional in presets: providers and the tool install the runtime on first use.
"""

from __future__ import annotations

from dsh.core import Context, EffectScope, NoConfig, Plugin
from dsh.subagent._runtime import SubagentRuntime

__all__ = ["plugin"]


def apply(ctx: Context, config: NoConfig, effects: EffectScope) -> None:
    """Install the subagent runtime as ``ctx.subagents``."""
    SubagentRuntime.of(ctx)


plugin = Plugin("dsh-subagent", apply, NoConfig)
