"""Real MCP clients configured with ``dsh mcp`` as an MCP server, offline: the Claude
Code CLI (bundled in the claude-agent-sdk wheel) on a fake Anthropic Messages server,
and the pinned Codex CLI (tools/install-codex.sh) on a fake OpenAI Responses server,
each call the ``delegate`` tool; ``dsh mcp`` runs the child (spawn) on a fake OpenAI
chat server, and the child's answer comes back into the product's reply.

Codex defers MCP tools behind its ``tool_search`` tool: its scripted model searches
(again while ``dsh mcp`` is still starting) until the ``mcp__dsh`` namespace is
found, then calls ``delegate`` in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.fixtures import fake_openai_preset
from dsh.testing.model_servers import (
    AnthropicMessagesServer,
    ChatReply,
    FunctionCall,
    MessagesReply,
    OpenAIChatServer,
    OpenAIResponsesServer,
    RecordedRequest,
    ResponsesReply,
    ToolUse,
    claude_code_env,
    codex_offline_env,
)
from dsh.testing.processes import live_children

pytestmark = pytest.mark.timeout(180)

CHILD_ANSWER = "the child's answer is 42"
REPO = Path(__file__).resolve().parents[1]
SEARCHES = 200
"""Tool searches the scripted Codex model makes at most before giving up."""


def clean_env() -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def delegate_preset(directory: Path, api_base: str) -> Path:
    """``dsh mcp``'s preset: a ``delegate`` tool on spawn, the children on ``api_base``."""
    path = directory / "delegate.toml"
    row = {"provider": "spawn", "tool_name": "delegate", "max_depth": 3}
    path.write_text(
        fake_openai_preset(api_base, "dsh-subagent-spawn-in-process", ("dsh-tool-subagent", row)),
        encoding="utf-8",
    )
    return path


def tool_results(request: RecordedRequest) -> list[str]:
    """The text of every ``tool_result`` block of an Anthropic Messages request."""
    body = request.json if isinstance(request.json, dict) else {}
    found = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner: Any = block.get("content")
                found.append(inner if isinstance(inner, str) else json.dumps(inner))
    return found


def claude_lead(request: RecordedRequest) -> MessagesReply:
    """Claude Code's model: call ``mcp__dsh__delegate``, then repeat what it returned."""
    results = tool_results(request)
    if results:
        return MessagesReply(text="claude got: " + " ".join(results))
    call = {"description": "ask the child", "prompt": "What is the answer?"}
    return MessagesReply(tool_uses=[ToolUse("mcp__dsh__delegate", call)])


def test_claude_code_calls_dsh_mcp_and_gets_the_childs_answer(tmp_path: Path) -> None:
    import claude_agent_sdk

    claude = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    before = live_children()
    with (
        OpenAIChatServer(default=ChatReply(text=CHILD_ANSWER)) as children,
        AnthropicMessagesServer(default=claude_lead) as lead,
    ):
        preset = delegate_preset(tmp_path, children.api_base)
        config = tmp_path / "mcp.json"
        args = ["-m", "dsh.cli", "mcp", "--preset", str(preset)]
        server = {"command": sys.executable, "args": args}
        config.write_text(json.dumps({"mcpServers": {"dsh": server}}), encoding="utf-8")
        done = subprocess.run(
            [
                str(claude),
                "-p",
                "Delegate the question to dsh.",
                "--mcp-config",
                str(config),
                "--strict-mcp-config",
                "--allowedTools",
                "mcp__dsh__delegate",
            ],
            env={**clean_env(), **claude_code_env(lead.api_base, tmp_path / "claude")},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=150,
            stdin=subprocess.DEVNULL,
        )
        child_calls = len(children.requests)
    assert done.returncode == 0, done.stderr
    assert "claude got:" in done.stdout
    assert CHILD_ANSWER in done.stdout
    assert child_calls >= 1
    assert_no_new_processes(before, within=10.0)


def _codex() -> str:
    """The pinned codex (tools/install-codex.sh, or DSH_CODEX_BIN): a failure in CI, a
    skip elsewhere."""
    path = Path(os.environ.get("DSH_CODEX_BIN") or REPO / ".tools" / "codex" / "bin" / "codex")
    if os.access(path, os.X_OK):
        return str(path)
    message = f"codex not found at {path}: run tools/install-codex.sh or set DSH_CODEX_BIN"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def codex_lead(request: RecordedRequest) -> ResponsesReply:
    """Codex's model: search the deferred tools until ``mcp__dsh`` is among them, call
    its ``delegate``, then repeat what it returned."""
    body = request.json if isinstance(request.json, dict) else {}
    items = [item for item in body.get("input") or [] if isinstance(item, dict)]
    outputs = [str(i.get("output")) for i in items if i.get("type") == "function_call_output"]
    if outputs:
        return ResponsesReply(text="codex got: " + " ".join(outputs))
    searches = [i for i in items if i.get("type") == "tool_search_output"]
    found = any(
        tool.get("name") == "mcp__dsh" for search in searches for tool in search.get("tools") or []
    )
    if found:
        call = {"description": "ask the child", "prompt": "What is the answer?"}
        return ResponsesReply(function_calls=[FunctionCall("delegate", call, namespace="mcp__dsh")])
    if len(searches) >= SEARCHES:
        return ResponsesReply(text="no dsh tools")
    search = {
        "type": "tool_search_call",
        "call_id": f"search_{len(searches)}",
        "execution": "client",
        "arguments": {"query": "dsh delegate"},
        "status": "completed",
    }
    return ResponsesReply(items=[search])


def test_codex_calls_dsh_mcp_and_gets_the_childs_answer(tmp_path: Path) -> None:
    codex = _codex()
    before = live_children()
    with (
        OpenAIChatServer(default=ChatReply(text=CHILD_ANSWER)) as children,
        OpenAIResponsesServer(default=codex_lead) as lead,
    ):
        preset = delegate_preset(tmp_path, children.api_base)
        env = {**clean_env(), **codex_offline_env(lead.api_base, tmp_path / "codex")}
        args = ["-m", "dsh.cli", "mcp", "--preset", str(preset)]
        with (Path(env["CODEX_HOME"]) / "config.toml").open("a", encoding="utf-8") as config:
            config.write(
                f"\n[mcp_servers.dsh]\ncommand = {json.dumps(sys.executable)}\n"
                f"args = {json.dumps(args)}\ntool_timeout_sec = 120\n"
                'default_tools_approval_mode = "approve"\n'
            )
        work = tmp_path / "work"
        work.mkdir()
        done = subprocess.run(
            [codex, "exec", "--skip-git-repo-check", "Delegate the question to dsh."],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=150,
            stdin=subprocess.DEVNULL,
        )
        child_calls = len(children.requests)
    assert done.returncode == 0, done.stderr
    assert "codex got:" in done.stdout, done.stdout
    assert CHILD_ANSWER in done.stdout
    assert child_calls >= 1
    assert_no_new_processes(before, within=10.0)
