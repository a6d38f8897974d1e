# ruff: noqa: E501  (the presets below are TOML, one row a line)
"""Failures the model saw are not hidden from the user or a script: a refused tool call
(the lead's or a child's, ``ask`` with nobody to answer or ``deny``) and a delegation
that could not start are a ``✗`` line on stderr, and ``dsh run`` exits 3 ("finished
with failures"). What a run cost: a known model is priced, an unknown one says
``cost unknown`` once."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer
from dsh.testing.model_servers._http import RecordedRequest
from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(90)


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def dsh_run(
    tmp_path: Path, preset: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "p.toml"
    path.write_text(preset)
    return run_cli(
        "dsh.cli",
        ["run", "--preset", str(path), *args, "go"],
        cwd=tmp_path,
        env=clean_env(**env),
        timeout=80,
    )


def call_once(name: str, arguments: Mapping[str, Any]) -> Any:
    """A model that calls ``name`` once, then answers with what the tool said."""

    def script(request: RecordedRequest) -> ChatReply:
        body = request.json if isinstance(request.json, Mapping) else {}
        messages: list[Any] = body.get("messages") or []
        if not any(m.get("role") == "tool" for m in messages):
            return ChatReply(tool_calls=[ChatToolCall(name, dict(arguments))])
        return ChatReply(text="tool said: " + str(messages[-1].get("content")))

    return script


def against_server(
    tmp_path: Path, preset: str, script: Any, model: str = "gpt-4o-mini", *args: str
) -> subprocess.CompletedProcess[str]:
    with OpenAIChatServer(default=script, api_key="k") as srv:
        return dsh_run(
            tmp_path,
            preset,
            *args,
            OPENAI_BASE_URL=srv.api_base,
            OPENAI_API_KEY="k",
            OPENAI_MODEL=model,
        )


@pytest.mark.parametrize(
    ("preset", "why"),
    [
        ('extends = "standard"\n', "nobody can answer"),
        (
            'extends = "standard"\n[permissions.tools]\nshell = "deny"\n',
            "denied by the permission policy",
        ),
    ],
)
def test_a_refused_shell_call_of_the_lead_is_shown_and_exits_3(
    tmp_path: Path, preset: str, why: str
) -> None:
    done = against_server(tmp_path, preset, call_once("shell", {"command": "touch ran"}))
    assert done.returncode == 3, done.stderr
    refused = [line for line in done.stderr.splitlines() if line.startswith("✗ lead: refused:")]
    assert len(refused) == 1, done.stderr
    assert why in refused[0]
    assert "dsh run: finished with failures: 1 tool call refused" in done.stderr
    assert not (tmp_path / "ran").exists()
    assert done.stdout.startswith("tool said:")  # the answer still comes, alone on stdout


CHILD_SHELL = """
[agent.model]
adapter = "scripted"
[agent.model.options]
mode = "sequence"
[[agent.model.options.replies]]
tool_calls = [{ name = "subagent", arguments = { description = "child runs shell", prompt = "run it" } }]
[[agent.model.options.replies]]
text = "lead done"

[[plugin]]
name = "dsh-tool-shell"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config = { provider = "spawn", tool_name = "subagent", agent_options = { model = { adapter = "scripted", options = { mode = "sequence", replies = [
  { tool_calls = [{ name = "shell", arguments = { command = "touch child-ran" } }] },
  { text = "child done: {tool_results}" },
] } } } }
"""


def test_a_refused_call_of_a_child_is_shown_under_it_and_exits_3(tmp_path: Path) -> None:
    done = dsh_run(tmp_path, CHILD_SHELL)
    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    refused = [line for line in lines if "refused:" in line]
    assert len(refused) == 1, done.stderr
    assert refused[0].strip().startswith('✗ [spawn] "child runs shell": refused: tool "shell"')
    assert "nobody can answer" in refused[0]
    assert "finished with failures: 1 tool call refused" in done.stderr
    assert not (tmp_path / "child-ran").exists()
    # With --yes the same run is a plain success.
    yes = dsh_run(tmp_path, CHILD_SHELL, "--yes")
    assert yes.returncode == 0, yes.stderr
    assert "refused" not in yes.stderr
    assert (tmp_path / "child-ran").exists()


ACP_MISSING = """
extends = "standard"

[[plugin]]
name = "dsh-subagent-acp"
config = { command = "dsh-no-such-agent-here", args = ["acp"] }

[[plugin]]
id = "acp-tool"
name = "dsh-tool-subagent"
config = { provider = "acp", tool_name = "subagent_acp", max_depth = "provider-managed" }
"""


def test_an_acp_child_that_cannot_start_is_a_failed_node_and_exits_3(tmp_path: Path) -> None:
    script = call_once("subagent_acp", {"description": "remote helper", "prompt": "hi"})
    done = against_server(tmp_path, ACP_MISSING, script)
    assert done.returncode == 3, done.stderr
    failed = [line for line in done.stderr.splitlines() if line.startswith("✗ ")]
    assert len(failed) == 1, done.stderr
    assert failed[0].startswith('✗ [subagent_acp] "remote helper" not started')
    assert "dsh-no-such-agent-here" in failed[0]
    assert "No such file or directory" in failed[0]
    assert "finished with failures: 1 delegation failed" in done.stderr
    # --json says so too.
    with OpenAIChatServer(default=script, api_key="k") as srv:
        js = dsh_run(
            tmp_path, ACP_MISSING, "--json", OPENAI_BASE_URL=srv.api_base, OPENAI_API_KEY="k"
        )
    assert js.returncode == 3, js.stderr
    kinds = [json.loads(line)["type"] for line in js.stdout.splitlines()]
    assert "subagent/not_started" in kinds


def test_a_priced_model_shows_its_cost_and_an_unknown_one_says_so_once(tmp_path: Path) -> None:
    def answer(request: RecordedRequest) -> ChatReply:
        return ChatReply(text="hello", usage={"prompt_tokens": 12_000, "completion_tokens": 3_000})

    priced = against_server(tmp_path, 'extends = "standard"\n', answer, "gpt-4o-mini")
    assert priced.returncode == 0, priced.stderr
    (usage,) = [line for line in priced.stderr.splitlines() if line.startswith("usage:")]
    # 12,000 in at $0.15/M and 3,000 out at $0.60/M (genai-prices' table for gpt-4o-mini)
    assert "total 15,000 tokens (12,000 in / 3,000 out), $0.0036" in usage
    assert "cost unknown" not in priced.stderr

    unknown = against_server(tmp_path, 'extends = "standard"\n', answer, "my-local-model")
    assert unknown.returncode == 0, unknown.stderr
    assert unknown.stderr.count("cost unknown") == 1
    (usage,) = [line for line in unknown.stderr.splitlines() if line.startswith("usage:")]
    assert usage.endswith("; cost unknown")
    assert "$" not in usage
