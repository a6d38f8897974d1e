"""The shipped standard preset loads as shipped, and with every disabled row switched on."""

from __future__ import annotations

from importlib import resources

import pytest

from dsh.cli._presets import shipped_preset
from dsh.core import Context, parse_preset
from dsh.subagent import SubagentRuntime

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_standard_preset_as_shipped_gives_in_process_delegation() -> None:
    async with Context.open(shipped_preset("standard")) as ctx:
        assert SubagentRuntime.of(ctx).list() == ["spawn", "fork"]
        assert {"subagent", "subagent_fork"} <= set(ctx.tools.names())


async def test_every_row_of_the_standard_preset_loads_when_enabled() -> None:
    text = (resources.files("dsh.cli") / "presets" / "standard.toml").read_text(encoding="utf-8")
    assert "disabled = true" in text
    preset = parse_preset(text.replace("disabled = true", "disabled = false"))
    async with Context.open(preset) as ctx:
        assert SubagentRuntime.of(ctx).list() == ["spawn", "fork", "acp", "codex", "claude-code"]
        assert {
            "subagent",
            "subagent_fork",
            "subagent_acp",
            "subagent_codex",
            "subagent_claude",
        } <= set(ctx.tools.names())
