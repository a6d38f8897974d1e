"""Bounded task memory and per-token visibility, against a real ``dsh a2a`` process with
the SDK's client: finished tasks beyond ``--max-tasks`` are evicted oldest-finished first
(never a running one), finished tasks older than ``--task-ttl`` are forgotten, with
several named tokens a task is invisible to the others, and a token is in neither the
environment of what the agent runs nor the server's ``/proc/<pid>/environ``."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(150)]


def message(text: str, context_id: str | None = None) -> Message:
    msg = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
    if context_id:
        msg.context_id = context_id
    return msg


@asynccontextmanager
async def sdk_client(url: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=None)) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        yield ClientFactory(ClientConfig(httpx_client=http)).create(card)


async def run_task(client: Client, text: str, context_id: str | None = None) -> tuple[str, str]:
    """Run a task to its end; its id and context id."""
    events: list[StreamResponse] = []
    with anyio.fail_after(30):
        async for event in client.send_message(
            SendMessageRequest(message=message(text, context_id))
        ):
            events.append(event)
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED, events[-1]
    return events[0].task.id, events[0].task.context_id


@asynccontextmanager
async def hanging_task(client: Client) -> AsyncIterator[str]:
    """A task that runs until cancelled (cancelled on the way out); its id."""
    started = anyio.Event()
    ids: list[str] = []

    async def follow() -> None:
        async for event in client.send_message(SendMessageRequest(message=message("please hang"))):
            if event.HasField("task"):
                ids.append(event.task.id)
            if event.HasField("status_update"):
                started.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(follow)
        with anyio.fail_after(30):
            await started.wait()
        yield ids[0]
        cancelled = await client.cancel_task(CancelTaskRequest(id=ids[0]))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED


async def test_finished_tasks_beyond_max_tasks_are_evicted_oldest_first(
    tmp_path: Path, keyed_preset: Path, kit: Any
) -> None:
    server = kit.start_server(tmp_path, keyed_preset, "--max-tasks", "3")
    try:
        async with sdk_client(server.url) as client, hanging_task(client) as running:
            done = [(await run_task(client, f"task {n}"))[0] for n in range(4)]
            # kept: the running task and the two most recently finished ones
            for gone in done[:2]:
                with pytest.raises(TaskNotFoundError):
                    await client.get_task(GetTaskRequest(id=gone))
            for kept in done[2:]:
                task = await client.get_task(GetTaskRequest(id=kept))
                assert task.status.state == TaskState.TASK_STATE_COMPLETED
            task = await client.get_task(GetTaskRequest(id=running))
            assert task.status.state == TaskState.TASK_STATE_WORKING
            listed = await client.list_tasks(ListTasksRequest())
            assert sorted(t.id for t in listed.tasks) == sorted([running, *done[2:]])
    finally:
        assert server.stop() == 143
    assert "Traceback" not in server.stderr, server.stderr


async def test_finished_tasks_older_than_the_ttl_are_forgotten(
    tmp_path: Path, keyed_preset: Path, kit: Any
) -> None:
    server = kit.start_server(tmp_path, keyed_preset, "--task-ttl", "1")
    try:
        async with sdk_client(server.url) as client, hanging_task(client) as running:
            finished_at = time.monotonic()
            done, _ = await run_task(client, "say hi")
            await client.get_task(GetTaskRequest(id=done))  # there at first
            with anyio.fail_after(30):
                while True:
                    try:
                        await client.get_task(GetTaskRequest(id=done))
                    except TaskNotFoundError:
                        break
                    await anyio.sleep(0.2)
            assert time.monotonic() - finished_at >= 1.0
            # the running task is older than the ttl too, and still there
            task = await client.get_task(GetTaskRequest(id=running))
            assert task.status.state == TaskState.TASK_STATE_WORKING
    finally:
        assert server.stop() == 143
    assert "Traceback" not in server.stderr, server.stderr


TOKEN_A = "dsh-token-a-" + uuid.uuid4().hex
TOKEN_B = "dsh-token-b-" + uuid.uuid4().hex


async def test_with_named_tokens_a_task_is_visible_only_to_its_token(
    tmp_path: Path, keyed_preset: Path, kit: Any
) -> None:
    sessions = tmp_path / "sessions"
    server = kit.start_server(
        tmp_path,
        keyed_preset,
        "--token-env",
        "DSH_A2A_TOKEN_A",
        "--token-env",
        "DSH_A2A_TOKEN_B",
        "--sessions-dir",
        str(sessions),
        env={"DSH_A2A_TOKEN_A": TOKEN_A, "DSH_A2A_TOKEN_B": TOKEN_B},
    )
    try:
        assert "each sees only its own tasks" in server.stderr
        async with sdk_client(server.url, TOKEN_A) as alice, sdk_client(server.url, TOKEN_B) as bob:
            first, context = await run_task(alice, "one")
            async with hanging_task(alice) as running:
                for task_id in (first, running):
                    with pytest.raises(TaskNotFoundError):
                        await bob.get_task(GetTaskRequest(id=task_id))
                with pytest.raises(TaskNotFoundError):
                    await bob.cancel_task(CancelTaskRequest(id=running))
                with pytest.raises(TaskNotFoundError):
                    async for _ in bob.subscribe(SubscribeToTaskRequest(id=running)):
                        pass
                assert list((await bob.list_tasks(ListTasksRequest())).tasks) == []
                # B's message in A's context starts a conversation of B's own
                second, same_context = await run_task(bob, "two", context_id=context)
                assert same_context == context
                assert [t.id for t in (await bob.list_tasks(ListTasksRequest())).tasks] == [second]
                with pytest.raises(TaskNotFoundError):
                    await alice.get_task(GetTaskRequest(id=second))
                mine = await alice.list_tasks(ListTasksRequest())
                assert sorted(t.id for t in mine.tasks) == sorted([first, running])
    finally:
        assert server.stop() == 143
    assert "Traceback" not in server.stderr, server.stderr
    # three conversations of one turn each (A's, B's in A's context id, A's hanging one)
    turns = sorted(f.read_text().count('"type":"turn/end"') for f in sessions.glob("*.jsonl"))
    assert turns == [1, 1, 1], turns
    for token in (TOKEN_A, TOKEN_B):
        assert token not in server.stderr


async def test_the_token_is_not_in_what_the_agent_runs_nor_in_proc_environ(
    tmp_path: Path, kit: Any
) -> None:
    token = "dsh-secret-" + uuid.uuid4().hex
    script = (
        f"env > {tmp_path}/tool-env.txt;"
        f" tr '\\0' '\\n' < /proc/$PPID/environ > {tmp_path}/parent-env.txt"
    )
    preset = kit.command_tool_preset(tmp_path, script)
    server = kit.start_server(
        tmp_path,
        preset,
        "--token-env",
        "DSH_A2A_SECRET",
        "--log-level",
        "debug",
        env={"DSH_A2A_SECRET": token},
    )
    try:
        environ = Path(f"/proc/{server.process.pid}/environ").read_bytes()
        assert b"DSH_A2A_SECRET" in environ  # the variable was there...
        assert token.encode() not in environ  # ...its value is blanked
        async with sdk_client(server.url, token) as client:
            await run_task(client, "please run the script")
        tool_env = (tmp_path / "tool-env.txt").read_text()
        parent_env = (tmp_path / "parent-env.txt").read_text()
        assert "PATH=" in tool_env  # the script did run and see an environment
        assert "PATH=" in parent_env
        assert token not in tool_env
        assert "DSH_A2A_SECRET" not in tool_env
        assert token not in parent_env
    finally:
        assert server.stop() == 143
    assert token not in server.stderr
    assert "DEBUG" in server.stderr
