"""Two ``dsh a2a`` instances sharing one SQLite task store: a task started on one is visible
(status, result) on the other, and a cancel sent to the other stops it where it runs."""

from __future__ import annotations

import uuid
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
from google.protobuf.json_format import MessageToDict

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def message(text: str) -> Message:
    return Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])


async def client_for(http: httpx.AsyncClient, url: str, *, streaming: bool = True) -> Client:
    card = await A2ACardResolver(http, url).get_agent_card()
    return ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)


async def test_two_instances_share_tasks(tmp_path: Path, keyed_preset: Path, kit: Any) -> None:
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    first = kit.start_server(tmp_path, keyed_preset, "--task-store", store, name="first")
    second = kit.start_server(tmp_path, keyed_preset, "--task-store", store, name="second")
    try:
        assert "task store: sqlite:///" in first.stderr
        async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None)) as http:
            on_first = await client_for(http, first.url, streaming=False)
            on_second = await client_for(http, second.url)

            # a task done on the first instance: status and result on the second
            request = SendMessageRequest(message=message("say hello"))
            (reply,) = [e async for e in on_first.send_message(request)]
            task_id = reply.task.id
            assert reply.task.status.state == TaskState.TASK_STATE_COMPLETED
            seen = await on_second.get_task(GetTaskRequest(id=task_id))
            assert seen.status.state == TaskState.TASK_STATE_COMPLETED
            assert "".join(p.text for a in seen.artifacts for p in a.parts) == "Done: say hello"
            assert MessageToDict(seen.metadata)["dsh"]["usage"]["output_tokens"] == 3
            listed = await on_second.list_tasks(ListTasksRequest())
            assert [task.id for task in listed.tasks] == [task_id]

            # a task running on the first instance: working on the second, cancelled there
            streaming_first = await client_for(http, first.url)
            events: list[StreamResponse] = []
            started = anyio.Event()

            async def follow() -> None:
                request = SendMessageRequest(message=message("please hang"))
                async for event in streaming_first.send_message(request):
                    events.append(event)
                    if event.HasField("status_update"):
                        started.set()

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(follow)
                    await started.wait()
                    hanging = events[0].task.id
                    seen = await on_second.get_task(GetTaskRequest(id=hanging))
                    assert seen.status.state == TaskState.TASK_STATE_WORKING
                    # the second instance follows the task running on the first...
                    followed: list[StreamResponse] = []
                    subscribed = anyio.Event()

                    async def subscribe() -> None:
                        request = SubscribeToTaskRequest(id=hanging)
                        async for event in on_second.subscribe(request):
                            followed.append(event)
                            subscribed.set()

                    tg.start_soon(subscribe)
                    await subscribed.wait()
                    # ...and cancels it there
                    cancelled = await on_second.cancel_task(CancelTaskRequest(id=hanging))
                    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            # the first instance noticed (at the task's next update) and stopped its turn
            assert events[-1].HasField("task") or events[-1].HasField("status_update")
            final = events[-1].task if events[-1].HasField("task") else events[-1].status_update
            assert final.status.state == TaskState.TASK_STATE_CANCELED, events[-1]
            assert followed[0].task.status.state == TaskState.TASK_STATE_WORKING
            last = followed[-1]
            last_state = (last.task if last.HasField("task") else last.status_update).status.state
            assert last_state == TaskState.TASK_STATE_CANCELED, followed
            again = await streaming_first.get_task(GetTaskRequest(id=hanging))
            assert again.status.state == TaskState.TASK_STATE_CANCELED
    finally:
        assert first.stop() == 143
        assert second.stop() == 143
    for server in (first, second):
        assert "Traceback" not in server.stderr, server.stderr
        assert "ERROR" not in server.stderr, server.stderr


async def test_an_unusable_task_store_is_a_dsh_error_naming_the_value() -> None:
    from dsh.a2a._store import TaskStoreError, open_task_store
    from dsh.core import DshError

    with pytest.raises(DshError) as info:
        await open_task_store("mysql://db.example/tasks")
    assert isinstance(info.value, TaskStoreError)
    assert isinstance(info.value, ValueError)  # callers that catch ValueError still do
    assert "unsupported database 'mysql'" in str(info.value)
