"""A caller that dies: the streaming task it left behind is cancelled after
``--orphan-grace`` (its shell command killed, no further model call), unless someone
subscribes to it again in time; a background task (a send that returns at once) runs
to its end whoever listens.

The model is a fake OpenAI server whose first answer calls the shell tool with a long
``sleep``; the caller is the A2A SDK's client (A2A 1.0, or its A2A 0.3 client) in a
process of its own, killed with SIGKILL while the command runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)

from dsh.testing.fixtures import fake_openai_preset
from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer
from dsh.testing.processes import alive, cmdline, descendants

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

HERE = Path(__file__).resolve().parent
GRACE = 1.5
BOUND = 20.0
"""Seconds past the grace period the cancel may take on a busy machine."""


def shell_agent_preset(base: str) -> str:
    """The agent on the fake model server at ``base``, with a shell it may use."""
    return fake_openai_preset(base, "dsh-tool-shell") + '\n[permissions.tools]\nshell = "allow"\n'


@pytest.fixture
def model() -> Iterator[OpenAIChatServer]:
    """Calls ``sleep`` on its first request, then says "slept"."""
    with OpenAIChatServer(default=ChatReply(text="slept")) as server:
        yield server


def sleep_call(seconds: float) -> ChatReply:
    return ChatReply(tool_calls=[ChatToolCall("shell", {"command": f"sleep {seconds}"})])


def start(tmp_path: Path, kit: Any, model: OpenAIChatServer) -> Any:
    preset = tmp_path / "shell-agent.toml"
    preset.write_text(shell_agent_preset(model.api_base), encoding="utf-8")
    return kit.start_server(tmp_path, preset, "--orphan-grace", str(GRACE), "--log-level", "info")


def sleepers(server: Any, seconds: float) -> list[int]:
    """The server's descendant processes running ``sleep <seconds>``."""
    found = []
    for pid in descendants(server.process.pid):
        line = cmdline(pid)
        if "sleep" in line and str(seconds) in line:
            found.append(pid)
    return found


async def wait_for(what: str, check: Any, bound: float = BOUND) -> float:
    """Wait until ``check()`` is true; the seconds that took."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < bound, f"not within {bound} s: {what}"
        await anyio.sleep(0.05)
    return time.monotonic() - started


def caller(server: Any, text: str, protocol: str, out: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as stdout:
        return subprocess.Popen(
            [
                sys.executable,
                str(HERE / "stream_client.py"),
                server.url,
                text,
                "--protocol",
                protocol,
            ],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def task_id_in(out: Path) -> str | None:
    for line in out.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if "task" in event:
            return str(event["task"]["id"])
    return None


async def sdk_client(http: httpx.AsyncClient, server: Any, *, streaming: bool = True) -> Client:
    card = await A2ACardResolver(http, server.url).get_agent_card()
    return ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)


async def task_state(client: Client, task_id: str) -> Task:
    return await client.get_task(GetTaskRequest(id=task_id))


async def killed_caller(
    tmp_path: Path, server: Any, model: OpenAIChatServer, protocol: str, seconds: float
) -> tuple[str, list[int], float]:
    """A caller streams "work", the agent runs ``sleep seconds``; the caller is killed.
    Returns the task id, the sleep's process ids and the monotonic time just before the
    kill (the server cannot see the caller go before it)."""
    model.script(sleep_call(seconds))
    out = tmp_path / f"caller-{protocol}.out"
    process = caller(server, "work", protocol, out)
    try:
        await wait_for("the sleep starts", lambda: sleepers(server, seconds), 60)
        await wait_for("the caller has the task", lambda: task_id_in(out) is not None)
    finally:
        killed = time.monotonic()
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    task_id = task_id_in(out)
    assert task_id is not None, out.read_text()
    return task_id, sleepers(server, seconds), killed


@pytest.mark.parametrize("protocol", ["1.0", "0.3"])
async def test_a_killed_streaming_caller_gets_its_task_cancelled(
    tmp_path: Path, kit: Any, model: OpenAIChatServer, protocol: str
) -> None:
    server = start(tmp_path, kit, model)
    try:
        task_id, pids, killed = await killed_caller(tmp_path, server, model, protocol, 41.25)
        async with httpx.AsyncClient(timeout=httpx.Timeout(30)) as http:
            client = await sdk_client(http, server)
            last: list[Task] = []

            async def ended() -> None:
                while True:
                    last[:] = [await task_state(client, task_id)]
                    if last[0].status.state != TaskState.TASK_STATE_WORKING:
                        return
                    await anyio.sleep(0.1)

            with anyio.fail_after(GRACE + BOUND):
                await ended()
            took = time.monotonic() - killed
            status = last[0].status
            assert status.state == TaskState.TASK_STATE_CANCELED, status
            assert "the caller went away" in status.message.parts[0].text
            assert took >= GRACE, took  # not before the grace period
            await wait_for("the sleep is gone", lambda: not any(alive(p) for p in pids))
            calls = len(model.requests)
            await anyio.sleep(2.0)
            assert len(model.requests) == calls == 1, [r.json for r in model.requests]
    finally:
        assert server.stop() == 143
    assert "Traceback" not in server.stderr, server.stderr


async def test_a_subscriber_in_time_keeps_the_task(
    tmp_path: Path, kit: Any, model: OpenAIChatServer
) -> None:
    server = start(tmp_path, kit, model)
    try:
        task_id, _pids, _killed = await killed_caller(tmp_path, server, model, "1.0", 4.25)
        async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None)) as http:
            client = await sdk_client(http, server)
            states = []
            with anyio.fail_after(60):
                async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                    if event.HasField("status_update"):
                        states.append(event.status_update.status.state)
                    elif event.HasField("task"):
                        states.append(event.task.status.state)
            assert states[-1] == TaskState.TASK_STATE_COMPLETED, states
            assert len(model.requests) == 2
    finally:
        assert server.stop() == 143
    assert "Traceback" not in server.stderr, server.stderr


@pytest.mark.parametrize("protocol", ["1.0", "0.3"])
async def test_a_background_task_runs_to_its_end(
    tmp_path: Path, kit: Any, model: OpenAIChatServer, protocol: str
) -> None:
    server = start(tmp_path, kit, model)
    model.script(sleep_call(3.25))
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30)) as http:
            client = await sdk_client(http, server, streaming=False)
            sender: Any = client
            if protocol == "0.3":
                from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport

                raw = (await http.get(server.url + ".well-known/agent-card.json")).json()
                sender = CompatJsonRpcTransport(http, None, raw["url"], is_shared_httpx=True)
            message = Message(
                role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text="work")]
            )
            request = SendMessageRequest(
                message=message, configuration=SendMessageConfiguration(return_immediately=True)
            )
            if protocol == "0.3":
                answer = await sender.send_message(request)
                task_id = answer.task.id
            else:
                async for event in client.send_message(request):
                    task_id = event.task.id
            state = (await task_state(client, task_id)).status.state
            assert state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
            await wait_for("the sleep starts", lambda: sleepers(server, 3.25), 60)
            with anyio.fail_after(60):
                while state not in (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_CANCELED):
                    await anyio.sleep(0.2)
                    state = (await task_state(client, task_id)).status.state
            assert state == TaskState.TASK_STATE_COMPLETED
            assert len(model.requests) == 2
    finally:
        assert server.stop() == 143
    assert "the caller went away" not in server.stderr
    assert "Traceback" not in server.stderr, server.stderr


def test_the_option_is_validated(tmp_path: Path, keyed_preset: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dsh.a2a", "--preset", str(keyed_preset), "--orphan-grace", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.returncode == 2
    assert "argument --orphan-grace: must be positive, got 0" in done.stderr
