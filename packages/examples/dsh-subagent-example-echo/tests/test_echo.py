"""The echo provider's own behaviour: progress per word, unknown usage, the shared
subprocess config, and diagnostics from the kit (stage, stderr tail, turn timeout)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from dsh.core import AbortSignal, Context, parse_preset
from dsh.subagent import (
    NO_START_CAPABILITIES,
    InstalledProvider,
    SubagentProgress,
    SubagentRuntime,
    SubagentStartRequest,
    SubagentUsage,
    UnsupportedCapability,
    installed_providers,
)
from dsh.subagent_example_echo import EchoConfig, EchoProvider, plugin
from dsh.subagent_example_echo._provider import CHILD
from dsh.subprocess import SubprocessConfig

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PRESET = """
[agent.model]
adapter = "scripted"

[[plugin]]
name = "dsh-subagent-example-echo"

[[plugin]]
name = "dsh-subagent-example-echo"
config = { name = "echo-quick", turn_timeout = 0.5 }
"""


@pytest.fixture
async def ctx() -> AsyncIterator[Context]:
    async with Context.open(parse_preset(PRESET)) as ctx:
        yield ctx


def request(ctx: Context, prompt: str, **fields: Any) -> SubagentStartRequest:
    return SubagentStartRequest(prompt, ctx.agents.create(), AbortSignal(), **fields)


async def test_echoes_with_a_progress_item_per_word_and_unknown_usage(ctx: Context) -> None:
    run = await SubagentRuntime.of(ctx).start("echo", request(ctx, "one  two\nthree"))
    async with run:
        items = [item async for item in run.progress()]
        result = await run.result
    assert result.stop_reason == "completed"
    assert result.output == "one two three"
    assert items == [SubagentProgress("text", text=w) for w in ("one ", "two ", "three ")]
    assert result.usage == SubagentUsage.unknown()
    assert result.usage.incomplete


async def test_a_failing_child_names_the_stage_and_shows_its_stderr(ctx: Context) -> None:
    run = await SubagentRuntime.of(ctx).start("echo", request(ctx, "fail"))
    async with run:
        result = await run.result
    assert result.stop_reason == "error"
    assert result.diagnostic is not None
    assert result.diagnostic.startswith("echo turn failed: RuntimeError: the echo child exited")
    assert "echo child: failing on purpose" in result.diagnostic  # the stderr tail


async def test_the_kit_stops_a_turn_past_turn_timeout(ctx: Context) -> None:
    run = await SubagentRuntime.of(ctx).start("echo-quick", request(ctx, "hang"))
    async with run:
        result = await run.result
    assert result.stop_reason == "error"
    assert "no answer within turn_timeout = 0.5 s" in (result.diagnostic or "")


async def test_the_childs_own_aborted_result_reaches_the_caller(ctx: Context) -> None:
    signal = AbortSignal()
    parent = ctx.agents.create()
    run = await SubagentRuntime.of(ctx).start(
        "echo", SubagentStartRequest("one two hang", parent, signal)
    )
    async with run:
        seen = []
        with anyio.fail_after(20):
            async for item in run.progress():
                seen.append(item.text)
                if len(seen) == 2:
                    break
            signal.abort("the parent changed its mind")
            result = await run.result
    assert seen == ["one ", "two "]
    assert result.stop_reason == "aborted"
    # EchoRun.turn's own result (the child answered "cancelled" within cancel_grace),
    # its output filled in by the kit from partial_output()
    assert result.diagnostic == "the parent changed its mind; the echo child stopped"
    assert result.output == "one two"


def test_the_provider_is_listed_as_installed() -> None:
    echo = [p for p in installed_providers() if p.name == "echo"]
    assert echo == [
        InstalledProvider(
            "echo",
            "dsh-subagent-example-echo",
            "dsh-subagent-example-echo",
            "dsh.subagent_example_echo:plugin",
        )
    ]
    assert echo[0].describe() == '"echo" (plugin "dsh-subagent-example-echo")'


async def test_no_start_capabilities(ctx: Context) -> None:
    with pytest.raises(UnsupportedCapability, match='"echo" does not support the "persona"'):
        await SubagentRuntime.of(ctx).start("echo", request(ctx, "hi", persona="terse"))


def test_config_is_the_shared_subprocess_config() -> None:
    config = EchoConfig()
    assert isinstance(config, SubprocessConfig)
    assert config.argv == [sys.executable, "-c", CHILD]
    assert EchoConfig.model_validate({"turn_timeout": 0}).turn_timeout is None
    provider = EchoProvider(EchoConfig(name="other"))
    assert (provider.name, provider.capabilities) == ("other", NO_START_CAPABILITIES)
    assert provider.inherits_parent_context is False
    assert plugin.name == "dsh-subagent-example-echo"
