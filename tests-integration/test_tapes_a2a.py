"""``dsh a2a --record DIR`` end to end (issue 24): a real ``dsh a2a`` process serves an
agent whose model is the fake OpenAI chat server; the A2A SDK's client sends it one
task, in which the model calls ``read_file`` and then answers. The server's tape holds
both model exchanges and the tool call with its result, and no credential. The same
task then replays through a second ``dsh a2a`` process (no ``--record``) whose model
and tool tape are a replaying :class:`TapeProxy` (``OPENAI_BASE_URL`` and
``DSH_TAPE_PROXY``), the model server stopped and no key set: the same answer; with
``replay_tools`` a changed file is not read again; with tools run again, the changed
file makes the second model call diverge (the client sees a failed task, the proxy
keeps the divergence)."""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

from dsh.tape import TapeProxy, read_tape
from dsh.testing.fixtures import ServingProcess, start_serving
from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer, RecordedRequest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

KEY = "sk-a2a-tape-key-0123456789abcdef"
MODEL = "fake-tape-model"
TASK = "A2ATASK: what does a.txt say?"
READY = re.compile(r"dsh a2a: serving \"[^\"]*\" at (\S+) ")

PRESET = """
[agent]
persona = "You are the A2A tape test agent."

[[plugin]]
name = "dsh-llm-openai"

[[plugin]]
name = "dsh-tool-fs"
"""


def answer(request: RecordedRequest) -> ChatReply:
    """Read a.txt, then say what the tool gave."""
    results = [str(m["content"]) for m in request.json["messages"] if m["role"] == "tool"]
    if not results:
        return ChatReply(tool_calls=[ChatToolCall("read_file", {"path": "a.txt"})])
    return ChatReply(text="a.txt says: " + results[0].strip())


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any model variable, plus ``extra``."""
    drop = ("OPENAI_", "DEEPSEEK_", "ANTHROPIC_", "DSH_TAPE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, **extra}


@contextmanager
def serving(work: Path, preset: Path, env: dict[str, str], *extra: str) -> Iterator[ServingProcess]:
    """``dsh a2a`` in ``work`` on a free port; SIGTERMed (status 143) afterwards."""
    argv = [sys.executable, "-m", "dsh.cli", "a2a", "--preset", str(preset), "--port", "0"]
    name = f"a2a-{uuid.uuid4().hex[:6]}.log"
    server = start_serving([*argv, *extra], READY, work.parent / name, env=env, cwd=work, bound=90)
    try:
        yield server
    finally:
        assert server.stop() == 143, server.stderr
    assert "Traceback" not in server.stderr, server.stderr


async def ask(url: str, text: str) -> tuple[Any, str]:
    """One task (no streaming) through the A2A SDK's client: its state and its text."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(60)) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        msg = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
        replies = []
        with anyio.fail_after(60):
            async for event in client.send_message(SendMessageRequest(message=msg)):
                replies.append(event)
    (reply,) = replies
    task = reply.task
    text_out = "".join(p.text for a in task.artifacts for p in a.parts)
    if not text_out and task.status.HasField("message"):
        text_out = "".join(p.text for p in task.status.message.parts)
    return task.status.state, text_out


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    return folder


async def test_dsh_a2a_record_writes_a_tape_that_replays(tmp_path: Path, work: Path) -> None:
    preset = tmp_path / "agent.toml"
    preset.write_text(PRESET)
    tape_dir = tmp_path / "a2a-tape"
    with OpenAIChatServer(default=answer, api_key=KEY) as model:
        env = clean_env(OPENAI_BASE_URL=model.api_base, OPENAI_API_KEY=KEY, OPENAI_MODEL=MODEL)
        with serving(work, preset, env, "--record", str(tape_dir)) as server:
            state, recorded = await ask(server.url, TASK)
        assert len(model.requests) == 2
    assert state == TaskState.TASK_STATE_COMPLETED, recorded
    assert recorded == "a.txt says: alpha"

    tape = read_tape(tape_dir)
    assert tape.header["model"] == MODEL
    assert [(e["label"], e["path"], e["call"]) for e in tape.exchanges] == [
        ("openai", "/chat/completions", 0),
        ("openai", "/chat/completions", 1),
    ]
    assert len({e["conversation"] for e in tape.exchanges}) == 1
    assert TASK in str(tape.exchanges[0]["request"])
    assert "alpha" in str(tape.exchanges[1]["request"])  # the tool's result went back
    (tool,) = tape.tools
    assert (tool["name"], tool["arguments"], tool["call"]) == ("read_file", {"path": "a.txt"}, 0)
    assert "alpha" in str(tool["result"]["content"])
    assert tool["result"]["is_error"] is False
    assert KEY not in (tape_dir / "tape.jsonl").read_text()

    # Replay: the model server is gone, no key is set; a replaying proxy is the model
    # (OPENAI_BASE_URL) and the tool tape (DSH_TAPE_PROXY) of a plain `dsh a2a`.
    with TapeProxy(tape_dir, "replay") as proxy:
        env = clean_env(OPENAI_BASE_URL=proxy.base_url("openai"), OPENAI_MODEL=MODEL, **proxy.env())
        with serving(work, preset, env) as server:
            state, replayed = await ask(server.url, TASK)
        assert proxy.divergence is None, proxy.divergence
        assert (proxy.replayed, proxy.remaining) == (2, 0)
    assert state == TaskState.TASK_STATE_COMPLETED, replayed
    assert replayed == recorded

    # The tool answered from the tape: the changed file is not read again.
    (work / "a.txt").write_text("changed\n")
    with TapeProxy(tape_dir, "replay", replay_tools=True) as proxy:
        env = clean_env(OPENAI_BASE_URL=proxy.base_url("openai"), OPENAI_MODEL=MODEL, **proxy.env())
        with serving(work, preset, env) as server:
            state, taped = await ask(server.url, TASK)
        assert proxy.divergence is None, proxy.divergence
    assert (state, taped) == (TaskState.TASK_STATE_COMPLETED, recorded)

    # Tools run again (the default): the changed file changes the second model call,
    # which the tape does not hold: the task fails and the proxy shows where.
    with TapeProxy(tape_dir, "replay") as proxy:
        env = clean_env(OPENAI_BASE_URL=proxy.base_url("openai"), OPENAI_MODEL=MODEL, **proxy.env())
        with serving(work, preset, env) as server:
            state, shown = await ask(server.url, TASK)
        divergence = proxy.divergence
    assert divergence is not None
    assert state == TaskState.TASK_STATE_FAILED, shown
    assert divergence.call == 1  # the read_file result differs: the second model call
    assert "changed" in divergence.describe()
