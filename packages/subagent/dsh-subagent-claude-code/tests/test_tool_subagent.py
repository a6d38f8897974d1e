"""Through the real dsh-tool-subagent, loaded from preset rows: a parent agent with a
scripted model delegates to Claude Code and gets the answer back in its log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh.cli._presets import shipped_preset
from dsh.core import Context, Preset, ScriptedAdapter, ScriptedReply, ScriptedToolCall, parse_preset
from dsh.core.models import BoundModel
from dsh.subagent import SubagentRuntime
from dsh.subagent_claude_code import ClaudeCodeProvider
from dsh.testing.fixtures import ONE_TOOL_CALL_TURN
from dsh.testing.model_servers import AnthropicMessagesServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def preset(env: dict[str, str]) -> str:
    """The preset rows a user writes (the provider's env points at the fake server)."""
    env_lines = "\n".join(f"{name} = {json.dumps(value)}" for name, value in env.items())
    return f"""
[agent.model]
adapter = "scripted"

[[plugin]]
name = "dsh-subagent-claude-code"
[plugin.config]
model = "claude-sonnet-4-5"
turn_timeout = 60
[plugin.config.env]
{env_lines}

[[plugin]]
id = "tool-subagent-claude"
name = "dsh-tool-subagent"
[plugin.config]
provider = "claude-code"
tool_name = "subagent_claude"
max_depth = "provider-managed"
"""


async def test_a_parent_delegates_through_the_tool_and_the_answer_lands_in_its_log(
    cli: str, server: AnthropicMessagesServer, workdir: Path, cc_env: dict[str, str]
) -> None:
    server.when("DSH-DELEGATED", "The README has 3 sections.")
    parent_model = BoundModel(
        ScriptedAdapter(
            [
                ScriptedReply(
                    tool_calls=[
                        ScriptedToolCall(
                            name="subagent_claude",
                            arguments={
                                "description": "count sections",
                                "prompt": "DSH-DELEGATED: how many sections has README.md?",
                            },
                        )
                    ]
                ),
                ScriptedReply(text="Parent heard: {tool_results}"),
            ]
        )
    )
    async with Context.open(parse_preset(preset(cc_env)), cwd=workdir) as ctx:
        tool = ctx.tools.get("subagent_claude")
        assert tool is not None
        assert set(tool.spec.parameters["properties"]) == {"description", "prompt"}
        parent = ctx.agents.create(model=parent_model)
        outcome = await parent.run("count the README's sections")
    assert outcome.stop_reason == "completed"
    events = parent.session.events
    assert [e.type for e in events] == list(ONE_TOOL_CALL_TURN)
    result = events[4].data
    assert not result.get("is_error")
    assert result["content"][0]["text"] == "The README has 3 sections."
    assert events[5].data["content"][0]["text"] == "Parent heard: The README has 3 sections."
    (request,) = server.requests
    assert "DSH-DELEGATED: how many sections has README.md?" in json.dumps(request.json)


async def test_the_standard_presets_disabled_rows_load_when_enabled() -> None:
    standard = shipped_preset("standard")
    rows = {row.id: row for row in standard.plugin}
    ours = [rows["subagent-claude-code"], rows["tool-subagent-claude"]]
    assert all(row.disabled for row in ours)  # shipped disabled
    enabled = Preset(
        agent=standard.agent, plugin=[row.model_copy(update={"disabled": False}) for row in ours]
    )
    async with Context.open(enabled) as ctx:
        provider = SubagentRuntime.of(ctx).get_provider("claude-code")
        assert isinstance(provider, ClaudeCodeProvider)
        assert provider.config.permission_mode == "dontAsk"
        assert provider.config.passthrough_env == ["ANTHROPIC_API_KEY"]
        assert ctx.tools.get("subagent_claude") is not None
