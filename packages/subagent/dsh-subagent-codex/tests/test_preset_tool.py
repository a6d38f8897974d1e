"""Through the real plugin loader and the real `dsh-tool-subagent`, from preset rows."""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any

import anyio
import pytest

from dsh.core import Context, Preset, load_preset
from dsh.core.models import ModelConfig
from dsh.core.plugins import AgentDefaults, PluginRow
from dsh.subagent import SubagentRuntime
from dsh.testing.fixtures import ONE_TOOL_CALL_TURN, delegating_parent, plugin_rows, toml_value

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def preset(codex_config: dict[str, Any]) -> str:
    """A scripted parent that delegates once through ``subagent_codex``."""
    parent = delegating_parent(
        "run echo in the shell",
        tool="subagent_codex",
        description="echo via codex",
        then="Codex reported: {tool_results}",
    )
    tool = {"provider": "codex", "tool_name": "subagent_codex", "max_depth": "provider-managed"}
    return (
        parent
        + plugin_rows(("dsh-subagent-codex", codex_config))
        + '\n[[plugin]]\nid = "tool-subagent-codex"\nname = "dsh-tool-subagent"\n'
        + f"config = {toml_value(tool)}\n"
    )


async def test_parent_delegates_through_the_tool_and_the_result_lands_in_its_log(
    codex: Any, tmp_path: Any
) -> None:
    config = codex.config(permission_mode="full-access")
    preset_file = tmp_path / "preset.toml"
    preset_file.write_text(preset(config))
    async with Context.open(load_preset(preset_file), cwd=codex.workspace) as ctx:
        assert SubagentRuntime.of(ctx).list() == ["codex"]
        tool = ctx.tools.get("subagent_codex")
        assert tool is not None
        assert set(tool.spec.parameters["properties"]) == {"description", "prompt"}
        ends: list[Any] = []
        ctx.events.on("subagent/end", ends.append)
        parent = ctx.agents.create()
        with anyio.fail_after(30):
            outcome = await parent.run("delegate the echo")
    assert outcome.stop_reason == "completed"
    types = [e.type for e in parent.session.events]
    assert types == list(ONE_TOOL_CALL_TURN)
    (result,) = [e.data for e in parent.session.events if e.type == "tool/result"]
    assert result["is_error"] is False
    text = result["content"][0]["text"]
    assert text.startswith("Tool said: ")
    assert text.rstrip().endswith("Output:\nhi")
    final = parent.session.events[-2].data["content"][0]["text"]
    assert final == f"Codex reported: {text}"
    # codex really ran the command the fake model asked for
    _, second = codex.server.matching("run echo in the shell")
    assert second.json["input"][-1]["type"] == "function_call_output"
    (end,) = ends
    assert end.data["provider"] == "codex"
    assert end.data["stop_reason"] == "completed"
    assert end.data["usage"]["input_tokens"] > 0


async def test_the_standard_preset_rows_work_once_enabled(codex: Any) -> None:
    """The disabled codex rows shipped in dsh-cli's standard preset, switched on (with the
    test's codex binary and home merged into the provider row), delegate for real."""
    standard = resources.files("dsh.cli") / "presets" / "standard.toml"
    shipped = tomllib.loads(standard.read_text(encoding="utf-8"))
    rows = {row.get("id"): row for row in shipped["plugin"]}
    provider_row, tool_row = rows["subagent-codex"], rows["tool-subagent-codex"]
    assert provider_row["disabled"] is True
    assert tool_row["disabled"] is True
    provider_config = {**provider_row["config"], **codex.config()}
    preset = Preset(
        agent=AgentDefaults(
            model=ModelConfig(
                adapter="scripted",
                options={
                    "replies": [
                        {
                            "tool_calls": [
                                {
                                    "name": "subagent_codex",
                                    "arguments": {"description": "d", "prompt": "say hello"},
                                }
                            ]
                        },
                        {"text": "{tool_results}"},
                    ]
                },
            )
        ),
        plugin=[
            PluginRow(id=provider_row["id"], name=provider_row["name"], config=provider_config),
            PluginRow(id=tool_row["id"], name=tool_row["name"], config=tool_row["config"]),
        ],
    )
    async with Context.open(preset, cwd=codex.workspace) as ctx:
        parent = ctx.agents.create()
        with anyio.fail_after(30):
            outcome = await parent.run("go")
    assert outcome.stop_reason == "completed"
    assert parent.session.events[-2].data["content"][0]["text"] == codex.hello
