"""``dsh run --budget-*``: a tree budget on the whole run. A real ``dsh run`` drives the
fake OpenAI-compatible server; the lead delegates to a spawn child that never stops
calling tools, and the run is stopped at its token budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer
from dsh.testing.model_servers._http import RecordedRequest
from dsh.testing.processes import cmdline, describe, live_children, run_cli

pytestmark = pytest.mark.timeout(60)

CHILD_PROMPT = "Read notes.txt again and again."
PER_CALL = {"prompt_tokens": 90, "completion_tokens": 10}


def script(request: RecordedRequest) -> ChatReply:
    body = request.json if isinstance(request.json, dict) else {}
    messages = body.get("messages") or []
    users = [m for m in messages if m.get("role") == "user"]
    if any(CHILD_PROMPT in str(m.get("content")) for m in users):
        return ChatReply(
            text="reading",
            tool_calls=[ChatToolCall("read_file", {"path": "notes.txt"})],
            usage=PER_CALL,
        )
    return ChatReply(
        tool_calls=[ChatToolCall("subagent", {"description": "loop", "prompt": CHILD_PROMPT})],
        usage=PER_CALL,
    )


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def dsh_run(tmp_path: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "dsh.cli", ["run", "--yes", *flags, "Do the loop."], cwd=tmp_path, env=env, timeout=50
    )


def test_budget_tokens_stops_the_whole_run(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("Notes.\n")
    with OpenAIChatServer(default=script, api_key="k") as srv:
        env = clean_env(OPENAI_BASE_URL=srv.api_base, OPENAI_API_KEY="k")
        done = dsh_run(tmp_path, env, "--budget-tokens", "1000")
        requests = srv.requests
    assert done.returncode == 1, done.stderr
    assert "dsh run: stopped by its budget: token budget 1000 reached: 1000 tokens used" in (
        done.stderr
    )
    assert len(requests) <= 10 + 1  # 100 tokens a call: the cap, plus one in flight
    assert "token budget 900 reached: 900 tokens used" in done.stderr  # the child's end
    assert "budget: 1,000 of 1,000 tokens\n" in done.stderr  # spent against each cap
    assert "budget: 900 of 900 tokens: token budget 900 reached" in done.stderr  # the child's


def test_json_progress_carries_each_budget_and_its_spend(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("Notes.\n")
    with OpenAIChatServer(default=script, api_key="k") as srv:
        env = clean_env(OPENAI_BASE_URL=srv.api_base, OPENAI_API_KEY="k")
        done = dsh_run(tmp_path, env, "--json", "--budget-tokens", "1000", "--budget-turns", "50")
    assert done.returncode == 1, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    (start,) = [e for e in events if e["type"] == "subagent/start"]
    assert start["budget"] == {"tokens": 900, "turns": 49}  # what the lead had left
    (end,) = [e for e in events if e["type"] == "subagent/end"]
    assert end["stop_reason"] == "budget"
    assert end["budget"] == {
        "caps": {"tokens": 900, "turns": 49},
        "spent": {"tokens": 900, "turns": 9},
    }


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--budget-tokens", "0", "--budget-tokens 0: budget tokens must be a positive integer"),
        ("--budget-usd", "-1", "--budget-usd -1.0: budget usd must be a positive number"),
        ("--budget-children", "-2", "--budget-children -2: budget children must be a non-neg"),
    ],
)
def test_bad_budget_flags_are_named(tmp_path: Path, flag: str, value: str, message: str) -> None:
    done = dsh_run(tmp_path, clean_env(OPENAI_BASE_URL="http://127.0.0.1:9/v1"), flag, value)
    assert done.returncode == 2
    assert message in done.stderr
    assert "omit the flag for no cap" in done.stderr


def test_budget_usd_on_a_model_without_a_price_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("Notes.\n")
    with OpenAIChatServer(default=script, api_key="k") as srv:
        env = clean_env(
            OPENAI_BASE_URL=srv.api_base, OPENAI_API_KEY="k", OPENAI_MODEL="no-price-model-x"
        )
        done = dsh_run(tmp_path, env, "--budget-usd", "1")
        requests = srv.requests
    assert done.returncode == 1, done.stderr
    assert (
        "dsh run: stopped by its budget: the budget could not be enforced: usd budget $1.00"
        " cannot be enforced: the model reported no cost" in done.stderr
    )
    assert len(requests) == 1  # the lead's first call, and nothing after it


# -- across processes: lead → acp → dsh acp → spawn ---------------------------------------

ACP_PROMPT = "Delegate the loop inward."


def nested_script(request: RecordedRequest) -> ChatReply:
    """The grandchild loops on read_file; the dsh acp child delegates it; the lead
    delegates to the dsh acp child."""
    body = request.json if isinstance(request.json, dict) else {}
    users = [str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "user"]
    if any(CHILD_PROMPT in text for text in users):
        return ChatReply(
            text="reading",
            tool_calls=[ChatToolCall("read_file", {"path": "notes.txt"})],
            usage=PER_CALL,
        )
    if any(ACP_PROMPT in text for text in users):
        return ChatReply(
            tool_calls=[ChatToolCall("subagent", {"description": "loop", "prompt": CHILD_PROMPT})],
            usage=PER_CALL,
        )
    return ChatReply(
        tool_calls=[ChatToolCall("subagent_acp", {"description": "remote", "prompt": ACP_PROMPT})],
        usage=PER_CALL,
    )


def acp_preset(tmp_path: Path) -> Path:
    child = tmp_path / "child.toml"
    child.write_text('extends = "standard"\n')
    args = ["-m", "dsh.cli", "acp", "--preset", str(child)]
    preset = tmp_path / "lead.toml"
    preset.write_text(
        f"""
extends = "standard"

[[plugin]]
name = "dsh-subagent-acp"
[plugin.config]
command = {json.dumps(sys.executable)}
args = {json.dumps(args)}
budget = true
depth_limit = true
passthrough_env = ["OPENAI_BASE_URL", "OPENAI_API_KEY"]

[[plugin]]
id = "acp-tool"
name = "dsh-tool-subagent"
config = {{ provider = "acp", tool_name = "subagent_acp", max_depth = 3 }}
"""
    )
    return preset


def test_budget_tokens_crosses_dsh_acp(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("Notes.\n")
    preset = acp_preset(tmp_path)
    with OpenAIChatServer(default=nested_script, api_key="k") as srv:
        env = clean_env(OPENAI_BASE_URL=srv.api_base, OPENAI_API_KEY="k")
        done = dsh_run(tmp_path, env, "--preset", str(preset), "--budget-tokens", "1000")
        requests = srv.requests
    assert done.returncode == 1, done.stderr
    # 100 tokens a call: the lead's call, the dsh acp child's, eight of the grandchild's
    assert len(requests) <= 10 + 1, done.stderr
    # the dsh acp child got what the lead had left (900) and stopped its own tree at it
    assert "token budget 900 reached: 900 tokens used" in done.stderr
    assert '✗ [acp] "remote" budget' in done.stderr
    assert "dsh run: stopped by its budget: token budget 1000 reached" in done.stderr
    # nothing left running: an orphaned dsh acp would be re-parented to this runner
    stray = [pid for pid in live_children() if "dsh.cli acp" in cmdline(pid)]
    assert not stray, [describe(pid) for pid in stray]
