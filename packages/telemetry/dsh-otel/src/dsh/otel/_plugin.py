"""The ``dsh-otel`` plugin: installs :class:`~dsh.otel.OtelTracing` as ``ctx.tracing``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dsh.core import Context, EffectScope, Plugin, install_tracing
from dsh.otel._tracing import OtelTracing

__all__ = ["OtelConfig", "plugin"]


class OtelConfig(BaseModel):
    """``[[plugin]] name = "dsh-otel"`` config."""

    model_config = ConfigDict(extra="forbid")

    capture_tool_arguments: bool = False
    """Record each tool call's arguments (JSON) as ``gen_ai.tool.call.arguments``.
    Off by default: arguments may hold file contents or secrets."""


def apply(ctx: Context, config: OtelConfig, effects: EffectScope) -> None:
    """Trace delegations, model calls and tool calls with OpenTelemetry."""
    tracing = OtelTracing(ctx, capture_tool_arguments=config.capture_tool_arguments)
    effects.add(install_tracing(ctx, tracing))
    effects.add(tracing.attach())


plugin = Plugin("dsh-otel", apply, OtelConfig)
