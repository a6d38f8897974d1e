"""The real claude-agent-acp (Claude Code as an ACP agent), offline, against the fake
Messages API (issue 21 item 11).

It starts every session in its "auto" mode, where it approves its own tool calls:
before the provider selected session modes, a scripted ``touch`` ran with no
permission request although the row said ``permission = "reject"``.

The agent is found through env ``DSH_CLAUDE_AGENT_ACP`` (its ``dist/index.js``), else
``<repo>/.tools/claude-agent-acp/bin/claude-agent-acp.js`` (what
``tools/install-claude-agent-acp.sh`` installs). Missing, the tests skip locally and
fail under ``CI=true``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh.subagent import StartFailed
from dsh.subagent_acp import AcpProviderConfig
from dsh.testing.model_servers import (
    AnthropicMessagesServer,
    MessagesReply,
    ToolUse,
    claude_code_env,
)
from dsh.testing.model_servers.anthropic_messages import reply_with_tool_result
from dsh.testing.processes import node_entry

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[4]
DEFAULT_ENTRY = REPO / ".tools" / "claude-agent-acp" / "bin" / "claude-agent-acp.js"
PROMPT = "please touch the marker"


@pytest.fixture(scope="module")
def entry() -> str:
    """claude-agent-acp's entry point (run with ``node``), or a skip / CI failure."""
    return node_entry(
        "DSH_CLAUDE_AGENT_ACP",
        DEFAULT_ENTRY,
        "claude-agent-acp",
        "tools/install-claude-agent-acp.sh (npm installs the pinned"
        " @agentclientprotocol/claude-agent-acp)",
    )


@pytest.fixture
def server() -> Iterator[AnthropicMessagesServer]:
    """A fake Messages API."""
    with AnthropicMessagesServer() as srv:
        yield srv


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """The file the scripted Bash call creates (in the run's cwd)."""
    return tmp_path / "marker"


def touch_script(server: AnthropicMessagesServer, marker: Path) -> None:
    """The model answers :data:`PROMPT` with a Bash ``touch``, then echoes the result."""
    command = f"touch {marker}"
    server.when(
        PROMPT,
        MessagesReply(tool_uses=[ToolUse("Bash", {"command": command, "description": "touch"})]),
        reply_with_tool_result("Tool said: {output}"),
    )


def agent_config(
    entry: str, server: AnthropicMessagesServer, root: Path, **fields: Any
) -> AcpProviderConfig:
    """claude-agent-acp under ``node``, offline: Claude Code's env from the claude-code
    provider's tests, pointed at ``server``. ``IS_SANDBOX=1``: as root it refuses to
    start a session otherwise (its auto mode needs the bypass flag, which Claude Code
    refuses to root outside a sandbox; the agent does run in one, dsh's)."""
    env = {**claude_code_env(server.api_base, root), "IS_SANDBOX": "1", "NO_COLOR": "1"}
    fields.setdefault("name", "claude-agent-acp")
    return AcpProviderConfig(
        command="node", args=[entry], env=env, turn_timeout=90, start_timeout=60, **fields
    )


async def test_reject_policy_binds_claude_agent_acp_in_its_auto_mode(
    rig: Any, entry: str, server: AnthropicMessagesServer, marker: Path, tmp_path: Path
) -> None:
    touch_script(server, marker)
    config = agent_config(entry, server, tmp_path / "cc")
    assert config.permission == "reject"
    run = await rig.start(config, PROMPT)
    async with run:
        with anyio.fail_after(100):
            result = await run.result
    assert result.stop_reason == "completed", result.diagnostic
    assert not marker.exists(), "the agent ran touch although the policy is reject"
    # the agent asked, and the reject answer is what the model got as the tool's result
    assert result.output == "Tool said: User refused permission to run tool"


async def test_claude_agent_acp_that_will_not_switch_is_refused(
    rig: Any, entry: str, server: AnthropicMessagesServer, marker: Path, tmp_path: Path
) -> None:
    touch_script(server, marker)
    # "dontAsk" is a mode Claude Code knows but claude-agent-acp 0.101.0 does not offer
    config = agent_config(entry, server, tmp_path / "cc", session_mode="dontAsk")
    with pytest.raises(StartFailed) as failed:
        await rig.start(config, PROMPT)
    message = failed.value.message
    assert message.startswith(
        "claude-agent-acp session/set_mode: the agent does not offer mode 'dontAsk'"
        " (offered: default, acceptEdits, plan, auto, bypassPermissions; current: auto)"
    ), message
    assert "may approve its own tool calls without asking, so the run is refused" in message
    assert not server.requests, "no model request before the refusal"
    assert not marker.exists()
