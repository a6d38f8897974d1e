"""Fixtures: a fake OpenAI chat server as the model, a preset serving two subagent tools
on ``spawn`` (children with a shell), and the official MCP Python client connected to
a real ``dsh mcp`` process (over stdio)."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from dsh.testing._acp_fixtures import dsh_state_dir, dsh_watchdogs_gone
from dsh.testing.fixtures import ServingProcess, fake_openai_preset, start_serving
from dsh.testing.model_servers import (
    ChatReply,
    ChatToolCall,
    HTTPError,
    OpenAIChatServer,
    RecordedRequest,
    last_user_text,
)

__all__ = [
    "ANSWER_SCHEMA",
    "anyio_backend",
    "dsh_state_dir",
    "dsh_watchdogs_gone",
    "kit",
    "mcp_session",
    "model",
    "preset",
    "sleepers",
    "start_http",
    "transport",
    "wait_for",
]

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
SLEEP = "31.5"
"""The ``sleep`` a long-running child's shell runs (a duration no other test uses)."""


def shell(command: str) -> ChatReply:
    return ChatReply(text="Running it.", tool_calls=[ChatToolCall("shell", {"command": command})])


REPLIES: dict[str, list[Any]] = {
    "ECHO": [shell("echo from-the-shell"), ChatReply(text="child saw: echoed")],
    "SLEEP": [shell(f"sleep {SLEEP}"), ChatReply(text="slept")],
    "FAIL": [HTTPError(400, "the model refuses on purpose")],
    "NEST": [
        ChatReply(
            tool_calls=[ChatToolCall("delegate", {"description": "inner", "prompt": "ECHO inner"})]
        ),
        ChatReply(text="nested done"),
    ],
    "EXTRACT": [
        ChatReply(tool_calls=[ChatToolCall("structured_output", {"answer": "42"})]),
        ChatReply(text="extracted"),
    ],
}
"""By a word of the prompt: the replies, one per tool step (the last one repeating)."""


def script(request: RecordedRequest) -> Any:
    """The reply for ``request`` (see :data:`REPLIES`; else "Done.")."""
    body = request.json if isinstance(request.json, Mapping) else {}
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        return ChatReply(text="Done.")
    step = sum(1 for m in messages[users[-1] + 1 :] if m.get("role") == "assistant")
    prompt = last_user_text(request)
    for word, replies in REPLIES.items():
        if word in prompt:
            return replies[min(step, len(replies) - 1)]
    return ChatReply(text="Done.")


@pytest.fixture
def model() -> Iterator[OpenAIChatServer]:
    """The children's model: by a word of the prompt (:data:`REPLIES`)."""
    with OpenAIChatServer(default=script) as server:
        yield server


def preset_text(base: str) -> str:
    """Two subagent tools on spawn (``delegate``; ``extract`` with an output schema)
    and a shell the children may use (not served: no ``dsh-mcp`` row exposes it)."""
    return (
        fake_openai_preset(
            base,
            "dsh-tool-shell",
            "dsh-subagent-spawn-in-process",
            (
                "dsh-tool-subagent",
                {"provider": "spawn", "tool_name": "delegate", "max_depth": 3},
            ),
            (
                "dsh-tool-subagent",
                {
                    "provider": "spawn",
                    "tool_name": "extract",
                    "description": "Extract the answer as JSON.",
                    "output_schema": ANSWER_SCHEMA,
                },
            ),
        )
        + '\n[permissions.tools]\nshell = "allow"\n'
    )


@pytest.fixture
def preset(tmp_path: Path, model: OpenAIChatServer) -> Path:
    path = tmp_path / "delegate.toml"
    path.write_text(preset_text(model.api_base), encoding="utf-8")
    return path


TRANSPORTS = ["stdio", "http"]
READY = re.compile(r"dsh mcp: serving \d+ tool\(s\) at (\S+) ")


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    """Each test that takes it runs over stdio and over streamable HTTP."""
    return str(request.param)


def start_http(tmp_path: Path, preset: Path, *extra: str) -> ServingProcess:
    """``dsh mcp --http`` on 127.0.0.1, a free port; waits until it serves."""
    argv = [sys.executable, "-m", "dsh.cli", "mcp", "--preset", str(preset), "--http"]
    return start_serving(
        [*argv, "--port", "0", *extra], READY, tmp_path / "dsh-mcp-http.stderr", cwd=tmp_path
    )


@asynccontextmanager
async def mcp_session(
    tmp_path: Path, preset: Path, transport: str = "stdio", *extra: str
) -> AsyncIterator[ClientSession]:
    """The MCP Python client on a ``dsh mcp`` process (initialized): on its stdio, or
    over streamable HTTP (``transport = "http"``; the process is stopped afterwards)."""
    if transport == "http":
        server = start_http(tmp_path, preset, *extra)
        try:
            async with (
                streamable_http_client(server.url) as (read, write),
                ClientSession(read, write) as session,
            ):
                with anyio.fail_after(60):
                    await session.initialize()
                yield session
        finally:
            assert server.stop() == 128 + signal.SIGTERM, server.stderr
        return
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "dsh.cli", "mcp", "--preset", str(preset), *extra],
        env=dict(os.environ),
        cwd=tmp_path,
    )
    with (tmp_path / "dsh-mcp.stderr").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(60):
                await session.initialize()
            yield session


def sleepers() -> list[int]:
    """Live descendants of this test (psutil) running the long child's ``sleep``."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE and f"sleep {SLEEP}" in " ".join(
                process.cmdline()
            ):
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


async def wait_for(what: str, check: Any, bound: float = 30.0) -> float:
    """Wait until ``check()`` is true (polling); the seconds that took."""
    started = anyio.current_time()
    while not check():
        assert anyio.current_time() - started < bound, f"not within {bound} s: {what}"
        await anyio.sleep(0.05)
    return anyio.current_time() - started


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def kit() -> Any:
    """This module: its helpers, for the tests (conftest is not importable by name)."""
    return sys.modules[__name__]
