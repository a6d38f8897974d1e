"""``dsh worker --record DIR`` end to end (issue 24): a real worker process whose model
is the fake OpenAI chat server (the environment's model) runs one delegation of the
temporal provider, in which the child calls ``read_file`` and then answers. The
worker's tape holds both model exchanges and the tool call with its result, and no
credential. The same delegation then replays on a second worker (no ``--record``)
whose model and tool tape are a replaying :class:`TapeProxy` (``OPENAI_BASE_URL`` and
``DSH_TAPE_PROXY``), the model server stopped and no key set: the same answer; with
``replay_tools`` a changed file is not read again; with tools run again, the changed
file stops the child at the divergence."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dsh.core import AbortSignal
from dsh.subagent import SubagentRuntime, SubagentStartRequest
from dsh.tape import TapeProxy, read_tape
from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer, RecordedRequest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

KEY = "sk-worker-tape-key-0123456789abcdef"
MODEL = "fake-tape-model"
TASK = "WORKERTASK: what does a.txt say?"

PRESET = """
[[plugin]]
name = "dsh-subagent-spawn-in-process"

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


@contextmanager
def worker_env(monkeypatch: pytest.MonkeyPatch, **variables: str) -> Iterator[None]:
    """The worker's environment (it inherits this process's while it starts): no model
    variable but ``variables``. This process's own environment is restored after."""
    with monkeypatch.context() as patch:
        for name in os.environ:
            if name.startswith(("OPENAI_", "DEEPSEEK_", "ANTHROPIC_", "DSH_TAPE_")):
                patch.delenv(name)
        for name, value in variables.items():
            patch.setenv(name, value)
        yield


async def delegate(tk: Any, server: Any, queue: str, cwd: Path) -> Any:
    """One delegation of ``TASK`` to ``queue`` through the temporal provider."""
    config = tk.provider_config(server, queue)
    async with tk.parent_context(config, cwd) as (ctx, provider):
        request = SubagentStartRequest(TASK, ctx.agents.create(), AbortSignal())
        run = await SubagentRuntime.of(ctx).start(provider.name, request)
        async with run:
            return await asyncio.wait_for(run.result, 60)


async def test_dsh_worker_record_writes_a_tape_that_replays(
    tk: Any, server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("alpha\n")
    preset = tmp_path / "worker.toml"
    preset.write_text(PRESET, encoding="utf-8")
    tape_dir = tmp_path / "worker-tape"

    def start_worker(name: str, *extra: str) -> Any:
        queue = f"rec-{uuid.uuid4().hex[:8]}"
        args = tk.worker_args(server, queue, preset, None, "--cwd", str(work), *extra)
        return queue, tk.WorkerProcess(args, name)

    with OpenAIChatServer(default=answer, api_key=KEY) as model:
        with worker_env(monkeypatch, OPENAI_BASE_URL=model.api_base, OPENAI_API_KEY=KEY,
                        OPENAI_MODEL=MODEL):  # fmt: skip
            queue, worker = start_worker("rec-a", "--record", str(tape_dir))
        try:
            recorded = await delegate(tk, server, queue, tmp_path)
        finally:
            assert worker.stop() == 0, worker.output()[-3000:]
        assert len(model.requests) == 2
    assert recorded.stop_reason == "completed", recorded
    assert recorded.output == "a.txt says: alpha"

    tape = read_tape(tape_dir)
    assert tape.header["model"] == MODEL
    assert [(e["label"], e["path"], e["call"]) for e in tape.exchanges] == [
        ("openai", "/chat/completions", 0),
        ("openai", "/chat/completions", 1),
    ]
    assert TASK in str(tape.exchanges[0]["request"])
    assert "alpha" in str(tape.exchanges[1]["request"])  # the tool's result went back
    (tool,) = tape.tools
    assert (tool["name"], tool["arguments"], tool["call"]) == ("read_file", {"path": "a.txt"}, 0)
    assert "alpha" in str(tool["result"]["content"])
    assert tool["result"]["is_error"] is False
    assert KEY not in (tape_dir / "tape.jsonl").read_text()

    async def replay(name: str, replay_tools: bool) -> tuple[Any, TapeProxy]:
        with TapeProxy(tape_dir, "replay", replay_tools=replay_tools) as proxy:
            with worker_env(monkeypatch, OPENAI_BASE_URL=proxy.base_url("openai"),
                            OPENAI_MODEL=MODEL, **proxy.env()):  # fmt: skip
                queue, worker = start_worker(name)
            try:
                result = await delegate(tk, server, queue, tmp_path)
            finally:
                assert worker.stop() == 0, worker.output()[-3000:]
        return result, proxy

    # The model server is gone and no key is set: the tape answers.
    replayed, proxy = await replay("replay-a", False)
    assert proxy.divergence is None, proxy.divergence
    assert (proxy.replayed, proxy.remaining) == (2, 0)
    assert (replayed.stop_reason, replayed.output) == ("completed", recorded.output)

    # The tool answered from the tape: the changed file is not read again.
    (work / "a.txt").write_text("changed\n")
    taped, proxy = await replay("replay-b", True)
    assert proxy.divergence is None, proxy.divergence
    assert (taped.stop_reason, taped.output) == ("completed", recorded.output)

    # Tools run again (the default): the changed file changes the child's second model
    # call, which the tape does not hold; the child fails and the proxy shows where.
    changed, proxy = await replay("replay-c", False)
    assert proxy.divergence is not None
    assert proxy.divergence.call == 1
    assert "changed" in proxy.divergence.describe()
    assert changed.stop_reason == "error", changed
