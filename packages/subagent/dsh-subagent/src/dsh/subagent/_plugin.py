"""The ``dsh-subagent`` plugin: installs ``ctx.subagents`` and sets its caps.

Optional in presets: providers and the tool install the runtime on first use. A
row with config sets admission control (see docs/capacity.md)::

    [[plugin]]
    name = "dsh-subagent"
    config.max_running = 64
    config.providers = { codex = 2, acp = 4, spawn = "unlimited" }
    config.max_descendants = 200
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import Context, EffectScope, Plugin
from dsh.subagent._runtime import SubagentRuntime

__all__ = ["SubagentConfig", "plugin"]

PositiveInt = Annotated[int, Field(ge=1, strict=True)]


class SubagentConfig(BaseModel):
    """Admission control of the context's subagent runtime (all optional)."""

    model_config = ConfigDict(extra="forbid")

    max_running: PositiveInt | None = None
    """Running children of all providers together in this context; more starts wait
    in a FIFO queue (state ``queued``). Default: no cap."""
    providers: dict[str, PositiveInt | Literal["unlimited"]] = Field(default_factory=dict)
    """A cap per provider name, over the provider's own default (process providers
    declare the number of cores; in-process providers none). ``"unlimited"`` lifts
    a provider's default."""
    max_descendants: PositiveInt | None = None
    """Runs one root agent's delegation tree may start in this process, all depths
    together, over the tree's life; further starts are refused (``CAPACITY_EXCEEDED``).
    A child in another process inherits what is left. Default: no cap."""


def apply(ctx: Context, config: SubagentConfig, effects: EffectScope) -> None:
    """Install the subagent runtime as ``ctx.subagents`` and set its caps."""
    runtime = SubagentRuntime.of(ctx)
    if config.max_running is None and not config.providers and config.max_descendants is None:
        return
    effects.add(
        runtime.configure(
            max_running=config.max_running,
            providers={
                name: None if cap == "unlimited" else cap for name, cap in config.providers.items()
            },
            max_descendants=config.max_descendants,
        )
    )


plugin = Plugin(
    "dsh-subagent",
    apply,
    SubagentConfig,
    description="Install the subagent runtime (ctx.subagents) and its caps on running children.",
)
