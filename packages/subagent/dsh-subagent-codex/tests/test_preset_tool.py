"""Through the real plugin loader and the real `dsh-tool-subagent`, from preset rows."""

from __future__ import annotations

import json
import tomllib
from importlib import resources
from typing import Any

import anyio
import pytest

from dsh.core import AgentDefaults, Context, ModelConfig, PluginRow, Preset, load_preset
from dsh.subagent import SubagentRuntime

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PRESET = """\
[agent.model]
adapter = "scripted"

[[agent.model.options.replies]]
[[agent.model.options.replies.tool_calls]]
name = "subagent_codex"
arguments = {{ description = "echo via codex", prompt = "run echo in the shell" }}

[[agent.model.options.replies]]
text = "Codex reported: {{tool_results}}"

[[plugin]]
name = "dsh-subagent-codex"
config = {codex_config}

[[plugin]]
id = "tool-subagent-codex"
name = "dsh-tool-subagent"
config = {{ provider = "codex", tool_name = "subagent_codex", max_depth = "provider-managed" }}
"""


def inline_table(value: Any) -> str:
    """A JSON-ish value as a TOML inline value."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {inline_table(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(inline_table(v) for v in value) + "]"
    return json.dumps(value)


async def test_parent_delegates_through_the_tool_and_the_result_lands_in_its_log(
    codex: Any, tmp_path: Any
) -> None:
    config = codex.config(permission_mode="full-access")
    preset_file = tmp_path / "preset.toml"
    preset_file.write_text(PRESET.format(codex_config=inline_table(config)))
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
    assert types == [
        "user/message",
        "turn/start",
        "assistant/message",
        "tool/call",
        "tool/result",
        "assistant/message",
        "turn/end",
    ]
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
