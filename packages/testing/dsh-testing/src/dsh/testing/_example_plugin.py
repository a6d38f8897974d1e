"""The code behind :mod:`dsh.testing.example_plugin` (its docstring says what it is)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dsh.core import (
    BusEvent,
    Context,
    EffectScope,
    Plugin,
    ScriptedAdapter,
    ScriptedReply,
    Tool,
    ToolContext,
)
from dsh.core.models import ModelConfig

__all__ = ["ExampleConfig", "ExampleService", "plugin"]


class ExampleConfig(BaseModel):
    """Config of the example plugin."""

    model_config = ConfigDict(extra="forbid")

    tool_name: str = "echo"
    prefix: str = Field("echo: ", max_length=40)
    service_name: str = "example"
    adapter_name: str = "example-echo"
    command_tool: str | None = None
    """Also register a tool of this name that runs a command and waits for it."""
    command_permission: Literal["allow", "ask", "deny"] | None = None
    """The command tool's permission policy (None: not governed, it always runs)."""


class ExampleService:
    """The service the plugin provides; counts bus events it has seen."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def record(self, event: BusEvent) -> None:
        """Bus listener."""
        self.seen.append(event.type)


class _EchoArgs(BaseModel):
    text: str


class _CommandArgs(BaseModel):
    argv: list[str] = Field(min_length=1)
    """The command and its arguments."""
    own_session: bool = True
    """Start it in a session of its own (as agent products do for tool commands)."""


async def _run_command(args: _CommandArgs, tctx: ToolContext) -> str:
    process = await asyncio.create_subprocess_exec(
        *args.argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=args.own_session,
    )
    try:
        status = await process.wait()
    finally:
        if process.returncode is None:  # cancelled: the command goes with the call
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if args.own_session:
                    os.killpg(process.pid, signal.SIGKILL)
                else:
                    process.kill()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(process.wait())
    return f"{args.argv[0]} exited with status {status}"


def apply(ctx: Context, config: ExampleConfig, effects: EffectScope) -> None:
    """Register the example tool, adapter, service and listener."""

    async def run(args: _EchoArgs, tctx: ToolContext) -> str:
        return config.prefix + args.text

    effects.add(ctx.tools.register(Tool.from_model(config.tool_name, "Echo text", _EchoArgs, run)))
    if config.command_tool is not None:
        effects.add(
            ctx.tools.register(
                Tool.from_model(
                    config.command_tool,
                    "Run a command and wait until it exits",
                    _CommandArgs,
                    _run_command,
                    permission=config.command_permission,
                )
            )
        )

    def factory(model: ModelConfig) -> ScriptedAdapter:
        return ScriptedAdapter([ScriptedReply(text=config.prefix + "{prompt}")])

    effects.add(ctx.llm.register_adapter(config.adapter_name, factory))
    service = ExampleService()
    effects.add(ctx.provide(config.service_name, service))
    effects.add(ctx.events.on("*", service.record))


plugin = Plugin("dsh-testing-example", apply, ExampleConfig)
