"""A model in one line: only OPENAI_BASE_URL and OPENAI_API_KEY set, no preset in the
folder. ``dsh run --yes`` (a real process) on the standard preset drives the fake
OpenAI-compatible server: the lead reads a real file with the file tool, delegates to
a spawn child that runs a real shell command, and answers with what both produced."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer
from dsh.testing.model_servers._http import RecordedRequest
from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(60)

TASK = "Summarise notes.txt and check the build number."
CHILD_PROMPT = "Run the build-number command and report what it printed."
FILE_TOKEN = "the launch code is tangerine-4711"
KEY = "sk-test-key-123"


def _messages(request: RecordedRequest) -> list[Mapping[str, Any]]:
    body = request.json if isinstance(request.json, Mapping) else {}
    return [m for m in body.get("messages") or [] if isinstance(m, Mapping)]


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def script(request: RecordedRequest) -> ChatReply:
    """The lead and the child, told apart by their user message; the step by the tool
    results since it."""
    messages = _messages(request)
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    user = _text(messages[last_user])
    results = [_text(m) for m in messages[last_user + 1 :] if m.get("role") == "tool"]
    if CHILD_PROMPT in user:
        if not results:
            return ChatReply(
                text="Running it.",
                tool_calls=[ChatToolCall("shell", {"command": "echo build-$((6 * 7))"})],
            )
        return ChatReply(text=f"The command printed: {results[-1]}")
    if not results:
        return ChatReply(tool_calls=[ChatToolCall("read_file", {"path": "notes.txt"})])
    if len(results) == 1:
        return ChatReply(
            text="Now the build number.",
            tool_calls=[
                ChatToolCall("subagent", {"description": "build number", "prompt": CHILD_PROMPT})
            ],
        )
    return ChatReply(text="FILE: " + results[0] + "\nCHILD: " + results[1])


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def test_openai_env_runs_the_standard_preset_with_tools_and_a_child(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(f"Notes.\n{FILE_TOKEN}\n")
    with OpenAIChatServer(default=script, api_key=KEY) as srv:
        env = clean_env(OPENAI_BASE_URL=srv.api_base, OPENAI_API_KEY=KEY)
        done = run_cli("dsh.cli", ["run", "--yes", TASK], cwd=tmp_path, env=env, timeout=50)
        requests = srv.requests
    assert done.returncode == 0, done.stderr
    answer = done.stdout
    assert FILE_TOKEN in answer  # read through the file tool
    assert "build-42" in answer  # computed by a real shell, in the child
    assert answer.startswith("FILE: ")
    assert "CHILD: " in answer
    # The lead and the child both talked to the server, with the key and the model.
    assert len(requests) == 5
    assert all(r.header("authorization") == f"Bearer {KEY}" for r in requests)
    assert {r.json["model"] for r in requests} == {"gpt-4o-mini"}
    lead_tools = {t["function"]["name"] for t in requests[0].json["tools"]}
    assert {"read_file", "write_file", "shell", "subagent", "subagent_fork"} <= lead_tools
    # Not a terminal: progress on stderr, the model picked from the environment said so.
    assert "OPENAI_BASE_URL is set" in done.stderr
    assert '+ [spawn] "build number" started' in done.stderr
    assert "usage: " in done.stderr


def test_without_yes_and_without_a_terminal_the_shell_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(FILE_TOKEN)
    with OpenAIChatServer(default=script, api_key=KEY) as srv:
        done = run_cli(
            "dsh.cli",
            ["run", "--json", TASK],
            cwd=tmp_path,
            env=clean_env(OPENAI_BASE_URL=srv.api_base, OPENAI_API_KEY=KEY),
            timeout=50,
        )
    assert done.returncode == 3, done.stderr  # finished with failures: the refused shell
    events = [json.loads(line) for line in done.stdout.splitlines()]
    answer = next(e for e in events if e["type"] == "answer")["text"]
    assert FILE_TOKEN in answer  # read_file is allowed by default
    assert "build-42" not in answer
    assert "nobody can answer" in answer  # the core's refusal, as the child saw it


def test_deepseek_key_picks_deepseek(tmp_path: Path) -> None:
    from dsh.core import model_from_env

    found = model_from_env({"DEEPSEEK_API_KEY": "x"})
    assert found is not None
    assert found.config.model == "deepseek-chat"
    assert found.config.options["base_url"] == "https://api.deepseek.com"
    assert found.config.options["api_key_env"] == "DEEPSEEK_API_KEY"
    openai = model_from_env({"OPENAI_API_KEY": "x", "OPENAI_MODEL": "gpt-x"})
    assert openai is not None
    assert openai.config.model == "gpt-x"
    assert openai.config.options["base_url"] == "https://api.openai.com/v1"
    local = model_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "DEEPSEEK_API_KEY": "x"})
    assert local is not None
    assert local.config.options["api_key_env"] == ""
    assert model_from_env({}) is None
