"""Plugins load from presets through their real entry points and unload cleanly."""

from __future__ import annotations

import pytest

from dsh.core import ConfigError, Context, PresetError, load_preset, parse_preset
from dsh.core.plugins import PluginError

pytestmark = pytest.mark.anyio

EXAMPLE_TWICE = """
[agent.model]
adapter = "scripted"

[[plugin]]
name = "dsh-testing-example"

[[plugin]]
id = "second"
name = "dsh-testing-example"
config = { tool_name = "echo2", service_name = "example2", adapter_name = "echo2" }
"""


async def test_preset_plugin_registers_effects_and_unload_removes_them() -> None:
    async with Context.open(parse_preset(EXAMPLE_TWICE)) as ctx:
        assert [p.id for p in ctx.plugins.loaded()] == ["dsh-testing-example", "second"]
        assert {"echo", "echo2"} <= set(ctx.tools.names())
        assert {"example-echo", "echo2"} <= set(ctx.llm.adapters())
        assert ctx.example is not ctx.example2
        ctx.events.emit("ping", {})
        assert ctx.example.seen == ["ping"]

        await ctx.plugins.unload("dsh-testing-example")

        assert "echo" not in ctx.tools.names()
        assert "example-echo" not in ctx.llm.adapters()
        with pytest.raises(AttributeError, match='no service "example"'):
            _ = ctx.example
        ctx.events.emit("ping", {})
        assert ctx.example2.seen == ["ping", "ping"]
        # the other row is untouched
        assert "echo2" in ctx.tools.names()


async def test_plugin_tool_runs_in_an_agent() -> None:
    preset = parse_preset(
        EXAMPLE_TWICE
        + """
[[agent.model.options.replies]]
tool_calls = [{ name = "echo", arguments = { text = "hi" } }]
[[agent.model.options.replies]]
text = "got {tool_results}"
"""
    )
    async with Context.open(preset) as ctx:
        agent = ctx.agents.create()
        outcome = await agent.run("go")
        assert outcome.stop_reason == "completed"
        assert agent.session.events[-2].data["content"][0]["text"] == "got echo: hi"


async def test_unknown_plugin_row_is_named() -> None:
    preset = parse_preset('[[plugin]]\nname = "dsh-testing-example"\n[[plugin]]\nname = "nope"\n')
    with pytest.raises(PluginError) as info:
        async with Context.open(preset):
            pass
    message = str(info.value)
    assert 'preset row 2 (id "nope", plugin "nope")' in message
    assert 'unknown plugin "nope"' in message
    assert "dsh-testing-example" in message  # lists what is installed


async def test_invalid_config_row_is_named_and_load_is_atomic() -> None:
    preset = parse_preset(
        '[[plugin]]\nname = "dsh-testing-example"\n'
        '[[plugin]]\nid = "bad"\nname = "dsh-testing-example"\n'
        'config = { tool_name = "x", prefix = 42 }\n'
    )
    async with Context.open() as ctx:
        with pytest.raises(PluginError) as info:
            await ctx.plugins.load_rows(preset.enabled_rows())
        assert (
            'preset row 2 (id "bad", plugin "dsh-testing-example"): invalid config: prefix'
            in str(info.value)
        )
        # the first row was rolled back
        assert ctx.plugins.loaded() == []
        assert "echo" not in ctx.tools.names()


async def test_duplicate_tool_name_row_is_named() -> None:
    preset = parse_preset(
        '[[plugin]]\nname = "dsh-testing-example"\n'
        '[[plugin]]\nid = "again"\nname = "dsh-testing-example"\n'
        'config = { service_name = "other", adapter_name = "other" }\n'
    )
    with pytest.raises(PluginError) as info:
        async with Context.open(preset):
            pass
    assert 'preset row 2 (id "again", plugin "dsh-testing-example")' in str(info.value)
    assert 'a tool named "echo" is already registered' in str(info.value)


def test_preset_file_errors_name_the_row(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "p.toml"  # type: ignore[operator]
    path.write_text('[[plugin]]\nname = "a"\ncolour = "red"\n')
    with pytest.raises(PresetError, match=r"/p\.toml row 1 \(plugin \"a\"\): colour"):
        load_preset(path)
    path.write_text('[[plugin]]\nid = "x"\nname = "a"\n[[plugin]]\nid = "x"\nname = "b"\n')
    with pytest.raises(PresetError, match=r"/p\.toml row 2 .*duplicate id"):
        load_preset(path)
    path.write_text("[agent\n")
    with pytest.raises(PresetError, match="not valid TOML"):
        load_preset(path)
    with pytest.raises(PresetError, match="cannot read preset"):
        load_preset(tmp_path / "missing.toml")  # type: ignore[operator]


def test_rows_of_the_same_plugin_get_distinct_ids_and_disabled_rows_are_skipped() -> None:
    preset = parse_preset(
        '[[plugin]]\nname = "a"\n[[plugin]]\nname = "a"\n[[plugin]]\nname = "b"\ndisabled = true\n'
    )
    assert [r.id for r in preset.plugin] == ["a", "a#2", "b"]
    assert [row.id for _, row in preset.enabled_rows()] == ["a", "a#2"]


async def test_no_model_configured_says_how_to_configure() -> None:
    async with Context.open() as ctx:
        with pytest.raises(ConfigError, match=r"(?s)no model is configured.*\[agent.model\]"):
            ctx.agents.create()
