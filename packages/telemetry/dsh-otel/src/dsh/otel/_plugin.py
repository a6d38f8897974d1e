"""The ``dsh-otel`` plugin: installs :class:`~dsh.otel.OtelTracing` as ``ctx.tracing``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dsh.core import Context, EffectScope, Plugin
from dsh.core.tracing import install_tracing, tracing_switched_on
from dsh.otel._tracing import DEFAULT_AGENT_NAME, OtelTracing

__all__ = ["OtelConfig", "plugin"]


class OtelConfig(BaseModel):
    """``[[plugin]] name = "dsh-otel"`` config."""

    model_config = ConfigDict(extra="forbid")

    capture_tool_arguments: bool = False
    """Record each tool call's arguments (JSON) as ``gen_ai.tool.call.arguments``.
    Off by default: arguments may hold file contents or secrets."""

    agent_name: str = DEFAULT_AGENT_NAME
    """``gen_ai.agent.name`` of agents without a label (a root agent, the agent
    ``dsh acp`` / ``dsh a2a`` serves); a labelled agent's is its label."""

    configure_sdk: bool | None = None
    """Configure the OpenTelemetry SDK from the standard ``OTEL_*`` variables (once per
    process, unless a tracer provider is installed already; needs ``dsh-otel[sdk]``).
    Default (None): when ``DSH_OTEL=1`` (``--otel``)."""


def apply(ctx: Context, config: OtelConfig, effects: EffectScope) -> None:
    """Trace delegations, model calls and tool calls with OpenTelemetry."""
    sdk = config.configure_sdk
    if sdk or (sdk is None and tracing_switched_on()):
        from dsh.otel._sdk import configure_sdk

        configure_sdk()
    tracing = OtelTracing(
        ctx, capture_tool_arguments=config.capture_tool_arguments, agent_name=config.agent_name
    )
    effects.add(install_tracing(ctx, tracing))
    effects.add(tracing.attach())


plugin = Plugin("dsh-otel", apply, OtelConfig)
