"""``dsh run --record DIR`` / ``--replay DIR``: a run recorded against the fake chat
server replays with no server, no key and no model named (the tape's header names
it); the usage errors exit 2. The whole tree across processes is
tests-integration/test_tapes.py."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dsh.tape import read_tape
from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer, RecordedRequest
from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(120)

KEY = "sk-cli-tape-key-0123456789abcdef"


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def dsh_run(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("dsh.cli", ["run", "--preset", "standard", *args], cwd=cwd, env=env, timeout=100)


def read_then_answer(request: RecordedRequest) -> ChatReply:
    messages: list[Any] = request.json["messages"]
    tool = [m for m in messages if m["role"] == "tool"]
    if not tool:
        return ChatReply(tool_calls=[ChatToolCall("read_file", {"path": "notes.txt"})])
    return ChatReply(text=f"the notes say {tool[0]['content'].strip()}")


def test_a_recorded_run_replays_without_server_key_or_model(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("forty-two\n")
    tape = tmp_path / "tape"
    with OpenAIChatServer(default=read_then_answer, api_key=KEY) as server:
        env = clean_env(OPENAI_BASE_URL=server.api_base, OPENAI_API_KEY=KEY, OPENAI_MODEL="m-1")
        recorded = dsh_run(tmp_path, env, "--record", str(tape), "what do the notes say?")
        assert {r.header("authorization") for r in server.requests} == {f"Bearer {KEY}"}
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout.strip() == "the notes say forty-two"
    assert "recorded 2 model calls" in recorded.stderr
    assert read_tape(tape).header["model"] == "m-1"

    replayed = dsh_run(tmp_path, clean_env(), "--replay", str(tape), "what do the notes say?")
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
    assert "replayed 2 model calls" in replayed.stderr
    assert "model m-1 at http://127.0.0.1:" in replayed.stderr  # from the tape's header
    # the proxy's secret path token is never shown: only where the calls go
    shown = re.compile(r"dsh: model m-1 at http://127\.0\.0\.1:\d+/\[tape proxy\]/u/openai ")
    assert shown.search(recorded.stderr), recorded.stderr
    assert shown.search(replayed.stderr), replayed.stderr

    # Another model named in the environment is another request: a divergence.
    other = dsh_run(
        tmp_path, clean_env(OPENAI_MODEL="m-2"), "--replay", str(tape), "what do the notes say?"
    )
    assert other.returncode == 3, other.stderr
    assert '- "model": "m-1",' in other.stderr
    assert '+ "model": "m-2",' in other.stderr


def test_record_and_replay_together_is_a_usage_error(tmp_path: Path) -> None:
    done = dsh_run(tmp_path, clean_env(), "--record", "a", "--replay", "b", "task")
    assert done.returncode == 2
    assert "not allowed with argument" in done.stderr


def test_replaying_a_missing_tape_is_a_usage_error(tmp_path: Path) -> None:
    done = dsh_run(tmp_path, clean_env(), "--replay", str(tmp_path / "nothing"), "task")
    assert done.returncode == 2
    assert "cannot read the tape" in done.stderr
    assert "Traceback" not in done.stderr


def test_resuming_a_directory_without_a_tape_is_a_usage_error(tmp_path: Path) -> None:
    folder = tmp_path / "never-recorded"
    env = clean_env(OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY=KEY)
    done = dsh_run(tmp_path, env, "--resume", str(folder), "task")
    assert done.returncode == 2, done.stderr
    assert f"--resume {folder}: there is no tape to resume" in done.stderr
    assert str(folder / "tape.jsonl") in done.stderr
    assert f"use --record {folder}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not folder.exists()  # no fresh recording was started


def test_a_preset_with_its_own_model_is_refused(tmp_path: Path) -> None:
    preset = tmp_path / "own.toml"
    preset.write_text(
        '[[plugin]]\nname = "dsh-llm-openai"\n[agent.model]\nadapter = "openai"\n'
        'model = "x"\noptions = { base_url = "http://127.0.0.1:9" }\n'
    )
    done = run_cli(
        "dsh.cli",
        ["run", "--preset", str(preset), "--replay", "t", "x"],
        cwd=tmp_path,
        env=clean_env(),
        timeout=100,
    )
    assert done.returncode == 2
    assert "names its own [agent.model]" in done.stderr


def test_rows_whose_children_would_miss_the_tape_are_named() -> None:
    from dsh.cli._tape import unrecorded_rows
    from dsh.core import parse_preset

    preset = parse_preset(
        """
[[plugin]]
id = "passes"
name = "dsh-subagent-acp"
config = { command = "x", passthrough_env = ["OPENAI_BASE_URL", "OPENAI_MODEL"] }
[[plugin]]
id = "scrubbed"
name = "dsh-subagent-acp"
config = { command = "x" }
[[plugin]]
id = "off"
name = "dsh-subagent-acp"
disabled = true
[[plugin]]
id = "codex"
name = "dsh-subagent-codex"
"""
    )
    found = unrecorded_rows(preset)
    assert len(found) == 1  # a codex row routes its children through DSH_TAPE_PROXY
    assert '"scrubbed"' in found[0]
    assert "does not pass OPENAI_BASE_URL" in found[0]
    assert unrecorded_rows(parse_preset('extends = "standard"\n')) == []
