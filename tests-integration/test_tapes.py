"""Issue 24's first must-show: a tree recorded with ``dsh run --record`` (lead -> spawn
child -> ``dsh acp`` grandchild, each calling a tool, against the fake OpenAI chat
server) replays with ``dsh run --replay`` with the server stopped and no key set, with
identical final output; a changed prompt, or a changed file deep in the tree, stops
with the divergence shown on stderr and exit status 3. The same proxy records and
replays the real Claude Code and Codex CLIs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dsh.tape import TapeProxy, read_tape
from dsh.testing.conformance import assert_no_new_processes
from dsh.testing.fixtures import plugin_rows, toml_value
from dsh.testing.model_servers import (
    AnthropicMessagesServer,
    ChatReply,
    ChatToolCall,
    MessagesReply,
    OpenAIChatServer,
    OpenAIResponsesServer,
    RecordedRequest,
    ResponsesReply,
    claude_code_env,
    codex_offline_env,
)
from dsh.testing.processes import live_children

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-tape-test-key-0123456789abcdef"
TASK = "LEADTASK: read a.txt, then ask a helper about b.txt"


def preset_text(path: Path, *acp_args: str) -> str:
    acp = [sys.executable, "-m", "dsh.cli", "acp", "--preset", str(path), *acp_args]
    return f"""
[agent]
persona = "You are the tape test agent."

[[plugin]]
name = "dsh-llm-openai"

[[plugin]]
name = "dsh-tool-fs"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
id = "tool-subagent"
name = "dsh-tool-subagent"
config = {{ provider = "spawn", tool_name = "subagent", max_depth = 3 }}

[[plugin]]
name = "dsh-subagent-acp"
[plugin.config]
command = {json.dumps(acp[0])}
args = {json.dumps(acp[1:])}
permission = "reject"
depth_limit = true
passthrough_env = ["OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"]

[[plugin]]
id = "tool-subagent-acp"
name = "dsh-tool-subagent"
config = {{ provider = "acp", tool_name = "subagent_acp", max_depth = 3 }}
"""


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def answer(request: RecordedRequest) -> ChatReply:
    """Each agent of the tree by its first user message; its step by the tool results
    it has. Every agent reads a file, the lead and the child also delegate."""
    messages = request.json["messages"]
    first = next(_text(m["content"]) for m in messages if m["role"] == "user")
    results = [_text(m["content"]) for m in messages if m["role"] == "tool"]
    if "LEAFTASK" in first:
        steps: list[Any] = [ChatToolCall("read_file", {"path": "c.txt"})]
        final = "leaf saw: "
    elif "MIDTASK" in first:
        steps = [
            ChatToolCall("read_file", {"path": "b.txt"}),
            ChatToolCall("subagent_acp", {"description": "leaf", "prompt": "LEAFTASK: c.txt"}),
        ]
        final = "mid saw: "
    else:
        steps = [
            ChatToolCall("read_file", {"path": "a.txt"}),
            ChatToolCall("subagent", {"description": "mid", "prompt": "MIDTASK: b.txt"}),
        ]
        final = "lead saw: "
    if len(results) < len(steps):
        return ChatReply(tool_calls=[steps[len(results)]])
    return ChatReply(text=final + " | ".join(r.replace("\n", " ") for r in results))


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def dsh_run(
    work: Path, preset: Path, env: dict[str, str], *args: str, task: str = TASK
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dsh.cli", "run", "--preset", str(preset), "--cwd"]
    return subprocess.run(
        [*command, str(work), *args, task],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    work = tmp_path / "work"
    work.mkdir()
    for name, text in {"a.txt": "alpha", "b.txt": "bravo", "c.txt": "charlie"}.items():
        (work / name).write_text(text + "\n")
    preset = tmp_path / "tree.toml"
    preset.write_text(preset_text(preset))
    return work, preset


def test_a_recorded_tree_replays_offline_and_a_change_is_shown(
    tmp_path: Path, tree: tuple[Path, Path]
) -> None:
    work, preset = tree
    tape = tmp_path / "tape"
    before = live_children()
    with OpenAIChatServer(default=answer, api_key=KEY) as server:
        env = clean_env(OPENAI_BASE_URL=server.api_base, OPENAI_API_KEY=KEY)
        started = time.monotonic()
        recorded = dsh_run(work, preset, env, "--record", str(tape))
        record_seconds = time.monotonic() - started
        calls = len(server.requests)
    assert recorded.returncode == 0, recorded.stderr
    answer_text = recorded.stdout
    assert "lead saw: alpha" in answer_text
    assert "mid saw: bravo" in answer_text
    assert "leaf saw: charlie" in answer_text  # the dsh acp grandchild's file, via the child
    assert calls == 8  # the lead and the child three calls each, the grandchild two
    exchanges = read_tape(tape).exchanges
    assert len(exchanges) == calls
    assert len({e["conversation"] for e in exchanges}) == 3
    assert sorted(e["call"] for e in exchanges) == [0, 0, 0, 1, 1, 1, 2, 2]
    assert KEY not in (tape / "tape.jsonl").read_text()

    # The server is gone and no key is set: the tape answers everything.
    offline = clean_env()
    started = time.monotonic()
    replayed = dsh_run(work, preset, offline, "--replay", str(tape))
    replay_seconds = time.monotonic() - started
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == answer_text
    assert f"replayed {calls} model calls" in replayed.stderr
    print(f"record {record_seconds:.2f} s, replay {replay_seconds:.2f} s")  # shown with -s

    # A changed prompt: the lead's first call is not on the tape.
    changed = dsh_run(work, preset, offline, "--replay", str(tape), task=TASK + " now")
    assert changed.returncode == 3, changed.stderr
    assert "tape divergence: openai /chat/completions" in changed.stderr
    assert "call 0 is not on the tape" in changed.stderr
    assert f'-   "content": "{TASK}"' in changed.stderr
    assert f'+   "content": "{TASK} now"' in changed.stderr

    # A changed file deep in the tree: the grandchild's second call (its read_file
    # result) differs; the run stops there with the grandchild's place shown.
    (work / "c.txt").write_text("changed\n")
    deep = dsh_run(work, preset, offline, "--replay", str(tape))
    assert deep.returncode == 3, deep.stderr
    assert "call 1 is not on the tape" in deep.stderr
    assert "charlie" in deep.stderr
    assert "changed" in deep.stderr
    assert_no_new_processes(before, within=5.0)


def test_a_claude_code_run_replays_with_the_server_stopped(tmp_path: Path) -> None:
    """The same proxy records the real Claude Code CLI (Anthropic Messages, streamed);
    its per-session ``metadata.user_id`` is a volatile field, so a second process
    replays from the tape with the fake server closed."""
    import claude_agent_sdk

    claude = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    tape, root = tmp_path / "tape", tmp_path / "cc"
    root.mkdir()

    def claude_p(proxy: TapeProxy) -> subprocess.CompletedProcess[str]:
        env = {**clean_env(), **claude_code_env(proxy.base_url("anthropic"), root)}
        return subprocess.run(
            [str(claude), "-p", "say hi"],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    before = live_children()
    with AnthropicMessagesServer(default=MessagesReply(text="hello from the tape")) as server:
        with TapeProxy(tape, "record", {"anthropic": server.api_base}) as proxy:
            recorded = claude_p(proxy)
        calls = len(server.requests)
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout == "hello from the tape\n"
    with TapeProxy(tape, "replay") as proxy:
        replayed = claude_p(proxy)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
    assert proxy.divergence is None
    assert (proxy.replayed, proxy.remaining) == (calls, 0)
    assert_no_new_processes(before, within=5.0)


def _codex() -> str:
    """The pinned codex (tools/install-codex.sh, or DSH_CODEX_BIN); as the codex
    provider's tests find it: a failure in CI, a skip elsewhere."""
    path = Path(os.environ.get("DSH_CODEX_BIN") or REPO / ".tools" / "codex" / "bin" / "codex")
    if os.access(path, os.X_OK):
        return str(path)
    message = f"codex not found at {path}: run tools/install-codex.sh or set DSH_CODEX_BIN"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def test_a_codex_run_replays_with_the_server_stopped(tmp_path: Path) -> None:
    """The real Codex CLI (OpenAI Responses, streamed) through the same proxy: two runs
    of one task differ only in the volatile fields (``prompt_cache_key``,
    ``client_metadata``, input item ids), so a later run replays from the tape."""
    codex = _codex()
    tape, root = tmp_path / "tape", tmp_path / "codex"
    work = root / "work"
    work.mkdir(parents=True)

    def codex_exec(proxy: TapeProxy) -> subprocess.CompletedProcess[str]:
        env = {**clean_env(), **codex_offline_env(proxy.base_url("openai"), root)}
        return subprocess.run(
            [codex, "exec", "--skip-git-repo-check", "say hi"],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    before = live_children()
    with OpenAIResponsesServer(default=ResponsesReply(text="hello from the tape")) as server:
        with TapeProxy(tape, "record", {"openai": server.api_base}) as proxy:
            recorded = codex_exec(proxy)
        calls = len(server.requests)
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout == "hello from the tape\n"
    with TapeProxy(tape, "replay") as proxy:
        replayed = codex_exec(proxy)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
    assert proxy.divergence is None
    assert (proxy.replayed, proxy.remaining) == (calls, 0)
    assert_no_new_processes(before, within=5.0)


PRODUCTS_TASK = "LEADTASK: ask codex and claude code to say hi"


def products_answer(request: RecordedRequest) -> ChatReply:
    """An agent with a ``subagent_acp`` tool hands the task to a ``dsh acp`` child; the
    agent with the product tools delegates to codex, then to Claude Code, then answers
    with both answers."""
    tools = {t["function"]["name"] for t in request.json.get("tools") or ()}
    results = [_text(m["content"]) for m in request.json["messages"] if m["role"] == "tool"]
    steps = [
        ChatToolCall("subagent_codex", {"description": "codex", "prompt": "CODEXTASK say hi"}),
        ChatToolCall("subagent_claude", {"description": "claude", "prompt": "CCTASK say hi"}),
    ]
    if "subagent_acp" in tools:
        steps = [ChatToolCall("subagent_acp", {"description": "mid", "prompt": "MIDTASK"})]
    if len(results) < len(steps):
        return ChatReply(tool_calls=[steps[len(results)]])
    return ChatReply(text="heard: " + " | ".join(r.replace("\n", " ") for r in results))


def tool_row(provider: str, tool: str) -> str:
    config = {"provider": provider, "tool_name": tool, "max_depth": "provider-managed"}
    return f'\n[[plugin]]\nid = "tool-{provider}"\nname = "dsh-tool-subagent"\n' + (
        f"config = {toml_value(config)}\n"
    )


def products_preset(
    codex: str, codex_env: dict[str, str], claude_env: dict[str, str], *, pool: bool = False
) -> str:
    """An agent on the environment's model, a codex row (``pool``: with a warm
    app-server) and a claude-code row with a tool each; the products pointed at the fake
    servers as their own tests do."""
    codex_row: dict[str, Any] = {
        "command": codex,
        "codex_home": codex_env["CODEX_HOME"],
        "env": {k: v for k, v in codex_env.items() if k != "CODEX_HOME"},
        "turn_timeout": 60,
    }
    if pool:
        codex_row["pool"] = {"size": 1}
    claude_row = {"env": claude_env, "model": "claude-sonnet-4-5", "turn_timeout": 60}
    return (
        '[agent]\npersona = "You are the tape test agent."\n'
        + plugin_rows(
            "dsh-llm-openai",
            ("dsh-subagent-codex", codex_row),
            ("dsh-subagent-claude-code", claude_row),
        )
        + tool_row("codex", "subagent_codex")
        + tool_row("claude-code", "subagent_claude")
    )


def acp_lead_preset(child_preset: Path, *state_dirs: Path) -> str:
    """A lead whose only delegation is to a ``dsh acp`` child on ``child_preset``
    (``state_dirs``: where the products below it write, writable in its sandbox)."""
    acp = {
        "state_dirs": [str(d) for d in state_dirs],
        "command": sys.executable,
        "args": ["-m", "dsh.cli", "acp", "--preset", str(child_preset)],
        "permission": "reject",
        "depth_limit": True,
        "passthrough_env": ["OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"],
    }
    return (
        '[agent]\npersona = "You are the tape test lead."\n'
        + plugin_rows("dsh-llm-openai", ("dsh-subagent-acp", acp))
        + tool_row("acp", "subagent_acp")
    )


@pytest.mark.parametrize("where", ["in-the-lead", "in-the-lead-warm-pool", "in-a-dsh-acp-child"])
def test_codex_and_claude_code_rows_record_and_replay_through_the_run_tape(
    tmp_path: Path, where: str
) -> None:
    """Issue 24's second must-show: ``dsh run --record`` with an agent that delegates
    to the real codex and the real Claude Code through their providers — the lead
    itself (codex started per run, or warm in a pool), or a ``dsh acp`` child of it
    (its providers learn of the tape from ``DSH_TAPE_PROXY``) — then, with every fake
    server stopped and no key set, ``dsh run --replay`` gives the same final output."""
    codex = _codex()
    work, tape, preset = tmp_path / "work", tmp_path / "tape", tmp_path / "products.toml"
    work.mkdir()
    before = live_children()
    with (
        OpenAIChatServer(default=products_answer, api_key=KEY) as lead,
        OpenAIResponsesServer(default=ResponsesReply(text="codex says hi")) as responses,
        AnthropicMessagesServer(default=MessagesReply(text="claude says hi")) as messages,
    ):
        codex_env = codex_offline_env(responses.api_base, tmp_path / "codex")
        claude_env = claude_code_env(messages.api_base, tmp_path / "claude")
        products = products_preset(codex, codex_env, claude_env, pool=where.endswith("pool"))
        if where.startswith("in-the-lead"):
            preset.write_text(products)
        else:
            (tmp_path / "child.toml").write_text(products)
            homes = (tmp_path / "codex", tmp_path / "claude")
            preset.write_text(acp_lead_preset(tmp_path / "child.toml", *homes))
        env = clean_env(OPENAI_BASE_URL=lead.api_base, OPENAI_API_KEY=KEY)
        started = time.monotonic()
        recorded = dsh_run(work, preset, env, "--record", str(tape), task=PRODUCTS_TASK)
        record_seconds = time.monotonic() - started
        calls = {
            "openai": len(lead.requests),
            "codex": len(responses.requests),
            "claude-code": len(messages.requests),
        }
    assert recorded.returncode == 0, recorded.stderr
    assert "not on the tape" not in recorded.stderr  # no notice names the product rows
    assert "codex says hi" in recorded.stdout
    assert "claude says hi" in recorded.stdout
    assert min(calls.values()) >= 1
    labels = [e["label"] for e in read_tape(tape).exchanges]
    assert {label: labels.count(label) for label in calls} == calls

    started = time.monotonic()
    replayed = dsh_run(work, preset, clean_env(), "--replay", str(tape), task=PRODUCTS_TASK)
    replay_seconds = time.monotonic() - started
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
    assert f"replayed {sum(calls.values())} model calls" in replayed.stderr
    assert "were not asked for" not in replayed.stderr
    print(f"{where}: {calls}, record {record_seconds:.2f} s, replay {replay_seconds:.2f} s")
    assert_no_new_processes(before, within=5.0)


def test_tool_calls_are_on_the_tape_replayed_with_replay_tools_and_resumed(
    tmp_path: Path, tree: tuple[Path, Path]
) -> None:
    """Format 2: the five tool calls of the tree (two in-process agents, one ``dsh acp``
    grandchild) are on the tape; ``--replay-tools`` answers them (a changed file is not
    read again); ``--resume`` of a tape cut after the grandchild's ``read_file`` asks
    the model only for the three calls after it, and runs no recorded tool again."""
    work, preset = tree
    tape = tmp_path / "tape"
    before = live_children()
    with OpenAIChatServer(default=answer, api_key=KEY) as server:
        env = clean_env(OPENAI_BASE_URL=server.api_base, OPENAI_API_KEY=KEY)
        recorded = dsh_run(work, preset, env, "--record", str(tape))
        assert recorded.returncode == 0, recorded.stderr
        assert "recorded 8 model calls and 5 tool calls" in recorded.stderr
        tools = read_tape(tape).tools
        assert sorted(t["name"] for t in tools) == [
            "read_file",
            "read_file",
            "read_file",
            "subagent",
            "subagent_acp",
        ]
        assert len({t["conversation"] for t in tools}) == 3
        # A crash after the grandchild read c.txt: the tape's lines up to that one.
        lines = (tape / "tape.jsonl").read_text().splitlines(keepends=True)
        cut = next(
            n for n, line in enumerate(lines) if '"c.txt"' in line and '"kind": "tool"' in line
        )
        crashed = tmp_path / "crashed"
        crashed.mkdir()
        (crashed / "tape.jsonl").write_text("".join(lines[: cut + 1]))
        (work / "c.txt").write_text("changed\n")  # a tool run again would see this
        asked = len(server.requests)
        resumed = dsh_run(work, preset, env, "--resume", str(crashed))
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout == recorded.stdout  # c.txt was not read again
        assert len(server.requests) - asked == 3  # leaf's last, mid's last, lead's last
        assert "5 model calls and 3 tool calls answered from the tape" in resumed.stderr

    offline = clean_env()
    plain = dsh_run(work, preset, offline, "--replay", str(tape))
    assert plain.returncode == 3, plain.stderr  # tools re-run: the changed file shows
    assert "changed" in plain.stderr
    taped = dsh_run(work, preset, offline, "--replay", str(tape), "--replay-tools")
    assert taped.returncode == 0, taped.stderr
    assert taped.stdout == recorded.stdout
    assert "answered 2 tool calls" in taped.stderr  # the lead's: its child never ran
    assert_no_new_processes(before, within=5.0)


def test_dsh_acp_record_writes_its_own_tape(tmp_path: Path, tree: tuple[Path, Path]) -> None:
    """``dsh acp --record DIR`` (``Context.open(record=...)``): the grandchild's two
    model calls and its tool call are on a tape of its own, the run not recording."""
    work, preset = tree
    own = work / "acp-tape"  # the child process may write only below its working folder
    preset.write_text(preset_text(preset, "--record", str(own)))
    with OpenAIChatServer(default=answer, api_key=KEY) as server:
        env = clean_env(OPENAI_BASE_URL=server.api_base, OPENAI_API_KEY=KEY)
        done = dsh_run(work, preset, env)
    assert done.returncode == 0, done.stderr
    assert "leaf saw: charlie" in done.stdout
    tape = read_tape(own)
    assert [e["call"] for e in tape.exchanges] == [0, 1]
    assert [(t["name"], t["arguments"]) for t in tape.tools] == [("read_file", {"path": "c.txt"})]
    assert KEY not in (own / "tape.jsonl").read_text()
