"""The standard preset gives the lead and its spawn and fork children the file and shell
tools, and a user's preset that extends it keeps them."""

from __future__ import annotations

import pytest

from dsh.core import Context, ModelRequest, ScriptedAdapter, ScriptedReply, parse_preset, text_of
from dsh.core.models import BoundModel

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TOOLS = {"read_file", "list_dir", "glob", "grep", "write_file", "edit_file", "shell"}


async def test_lead_spawn_and_fork_children_all_have_the_tools() -> None:
    seen: dict[str, set[str]] = {}

    def script(request: ModelRequest) -> ScriptedReply:
        users = [e for e in request.events if e.type == "user/message"]
        prompt = text_of(users[-1].data.get("content")) if users else ""
        results = [e for e in request.events[users[-1].seq :] if e.type == "tool/result"]
        seen[prompt] = {t.name for t in request.tools}
        if prompt == "go" and not results:
            return ScriptedReply.model_validate(
                {
                    "tool_calls": [
                        {
                            "name": "subagent",
                            "arguments": {"description": "s", "prompt": "spawned"},
                        },
                        {
                            "name": "subagent_fork",
                            "arguments": {"description": "f", "prompt": "forked"},
                        },
                    ]
                }
            )
        return ScriptedReply(text=f"done {prompt}")

    preset = parse_preset('extends = "standard"\n[agent.model]\nadapter = "scripted"\n')
    async with Context.open(preset) as ctx:
        lead = ctx.agents.create(model=BoundModel(ScriptedAdapter(script)))
        outcome = await lead.run("go")
        assert outcome.stop_reason == "completed"
    assert set(seen) >= {"go", "spawned", "forked"}
    for who in ("go", "spawned", "forked"):
        assert seen[who] >= TOOLS, (who, seen[who])
