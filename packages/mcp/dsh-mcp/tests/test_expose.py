"""The ``dsh-mcp`` row: ``expose`` serves other tools of the preset too (run as such,
under the preset's permissions); a name the preset does not have fails the start."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.testing.fixtures import plugin_rows
from dsh.testing.processes import run_cli

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def with_row(preset: Path, config: dict[str, Any]) -> Path:
    path = preset.with_name("exposing.toml")
    text = preset.read_text(encoding="utf-8")
    table = text.index("\n[agent.model]")
    path.write_text(text[:table] + plugin_rows(("dsh-mcp", config)) + text[table:])
    return path


async def test_an_exposed_tool_is_listed_and_runs(tmp_path: Path, preset: Path, kit: Any) -> None:
    exposing = with_row(preset, {"expose": ["shell"]})
    async with kit.mcp_session(tmp_path, exposing) as session:
        with anyio.fail_after(60):
            listed = await session.list_tools()
            result = await session.call_tool("shell", {"command": "echo exposed-$((6*7))"})
    assert {tool.name for tool in listed.tools} == {"delegate", "extract", "shell"}
    assert not result.is_error, result
    assert "exposed-42" in result.content[0].text  # type: ignore[union-attr]


def test_exposing_a_tool_the_preset_lacks_fails_the_start(tmp_path: Path, preset: Path) -> None:
    exposing = with_row(preset, {"expose": ["no_such_tool"]})
    done = run_cli("dsh.mcp", ["--preset", str(exposing)], cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "expose names tools the preset does not have: no_such_tool" in done.stderr


def test_a_preset_without_a_model_fails_the_start_naming_it(tmp_path: Path) -> None:
    """The rule of ``dsh run``: no ``[agent.model]`` and no model in the environment is
    one line naming the preset and what to set, exit status 2 (never a traceback)."""
    bare = tmp_path / "bare.toml"
    bare.write_text(plugin_rows(("dsh-subagent-spawn-in-process", {})), encoding="utf-8")
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    done = run_cli("dsh.mcp", ["--preset", str(bare)], cwd=tmp_path, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"dsh mcp: no model is configured in {bare}; add an [agent.model] table" in done.stderr
    assert "Traceback" not in done.stderr
