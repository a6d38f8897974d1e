"""The shared test helpers of :mod:`dsh.testing.fixtures`: the preset text they write
is the TOML the tests mean, and a server that never announces itself fails the test."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

from dsh.core import Context, parse_preset
from dsh.testing.fixtures import (
    FAIL_RULE,
    HANG_RULE,
    KEYED_PRESET,
    SPAWN_SUBAGENT_TOOL,
    delegate_rule,
    delegating_parent,
    keyed_preset,
    keyed_rule,
    plugin_rows,
    start_serving,
    toml_value,
)

pytestmark = pytest.mark.timeout(60)


def test_the_keyed_preset_is_the_documented_table() -> None:
    table = tomllib.loads(KEYED_PRESET)
    assert table["plugin"] == [{"name": "dsh-testing-keyed-model"}]
    assert table["agent"]["model"] == {
        "adapter": "keyed",
        "options": {
            "default": [{"text": "Done: {prompt}", "chunks": 3}],
            "rules": [
                {"contains": "hang", "replies": [{"hang": True}]},
                {"contains": "fail", "replies": [{"error": "the scripted model fails on purpose"}]},
            ],
        },
    }


def test_rules_and_plugins_append_in_order() -> None:
    text = keyed_preset(
        delegate_rule("go on"), HANG_RULE, default=None, plugins=SPAWN_SUBAGENT_TOOL
    )
    text += plugin_rows(("dsh-testing-example", {"command_tool": "run"})) + FAIL_RULE
    table = tomllib.loads(text)
    assert [p["name"] for p in table["plugin"]] == [
        "dsh-testing-keyed-model",
        "dsh-subagent-spawn-in-process",
        "dsh-tool-subagent",
        "dsh-testing-example",
    ]
    options = table["agent"]["model"]["options"]
    assert "default" not in options
    assert [r["contains"] for r in options["rules"]] == ["delegate", "hang", "fail"]
    call = {"name": "subagent", "arguments": {"description": "inner", "prompt": "go on"}}
    assert options["rules"][0]["replies"] == [
        {"text": "Delegating.", "tool_calls": [call]},
        {"text": "child done: {tool_results}"},
    ]


def test_delegating_parent_calls_once_then_answers() -> None:
    table = tomllib.loads(delegating_parent("work", then="saw: {tool_results}", tool="t"))
    call = {"name": "t", "arguments": {"description": "child", "prompt": "work"}}
    assert table["agent"]["model"] == {
        "adapter": "scripted",
        "options": {"replies": [{"tool_calls": [call]}, {"text": "saw: {tool_results}"}]},
    }


def test_toml_values_quote_what_needs_quoting() -> None:
    value = {"a.b": 'say "hi"\n', "n": [1, 2.5, True], "plain-key_1": {}}
    assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value


@pytest.mark.anyio
async def test_the_keyed_preset_loads_and_answers_by_prompt() -> None:
    async with Context.open(parse_preset(KEYED_PRESET + keyed_rule("x", {"text": "X!"}))) as ctx:
        agent = ctx.agents.create()
        assert (await agent.run("say x")).stop_reason == "completed"
        assert agent.session.events[-2].data["content"][0]["text"] == "X!"


def test_a_server_that_never_announces_itself_fails_with_its_output(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('no url here', flush=True)"]
    with pytest.raises(AssertionError, match="did not start within 30"):
        start_serving(argv, re.compile(r"at (\S+)"), tmp_path / "out.log", bound=30)
    assert "no url here" in (tmp_path / "out.log").read_text()
