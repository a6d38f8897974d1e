"""A small real plugin, installed through the ``dsh.plugins`` entry point.

Tests load it from presets to prove the loader and effect scoping end to end:
it registers a tool, an LLM adapter, a context service and a bus listener, all
recorded in its effect scope.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import (
    BusEvent,
    Context,
    EffectScope,
    ModelConfig,
    Plugin,
    ScriptedAdapter,
    ScriptedReply,
    Tool,
    ToolContext,
)

__all__ = ["ExampleConfig", "ExampleService", "plugin"]


class ExampleConfig(BaseModel):
    """Config of the example plugin."""

    model_config = ConfigDict(extra="forbid")

    tool_name: str = "echo"
    prefix: str = Field("echo: ", max_length=40)
    service_name: str = "example"
    adapter_name: str = "example-echo"


class ExampleService:
    """The service the plugin provides; counts bus events it has seen."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def record(self, event: BusEvent) -> None:
        """Bus listener."""
        self.seen.append(event.type)


class _EchoArgs(BaseModel):
    text: str


def apply(ctx: Context, config: ExampleConfig, effects: EffectScope) -> None:
    """Register the example tool, adapter, service and listener."""

    async def run(args: _EchoArgs, tctx: ToolContext) -> str:
        return config.prefix + args.text

    effects.add(ctx.tools.register(Tool.from_model(config.tool_name, "Echo text", _EchoArgs, run)))

    def factory(model: ModelConfig) -> ScriptedAdapter:
        return ScriptedAdapter([ScriptedReply(text=config.prefix + "{prompt}")])

    effects.add(ctx.llm.register_adapter(config.adapter_name, factory))
    service = ExampleService()
    effects.add(ctx.provide(config.service_name, service))
    effects.add(ctx.events.on("*", service.record))


plugin = Plugin("dsh-testing-example", apply, ExampleConfig)
