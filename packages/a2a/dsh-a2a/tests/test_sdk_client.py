"""The A2A SDK's own client (not dsh's provider) drives a real ``dsh a2a`` process: the
agent card, a send, a stream, a cancel in the middle of a stream, task lookup, and a
context that continues; every payload it receives parses strictly into the SDK's types."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

EXTENSION = "urn:dsh:a2a:extension:lineage:v1"


class Sdk:
    """The SDK's client for one server, over a recording transport."""

    def __init__(self, server: Any, http: httpx.AsyncClient, card: AgentCard) -> None:
        self.server = server
        self.http = http
        self.card = card

    def client(self, *, streaming: bool = True) -> Client:
        return ClientFactory(ClientConfig(httpx_client=self.http, streaming=streaming)).create(
            self.card
        )


@pytest.fixture
async def sdk(server: Any, kit: Any) -> AsyncIterator[tuple[Sdk, Any]]:
    transport = kit.RecordingTransport()
    async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(30, read=None)) as http:
        card = await A2ACardResolver(http, server.url).get_agent_card()
        yield Sdk(server, http, card), transport


async def collect(client: Client, msg: Message) -> list[StreamResponse]:
    events: list[StreamResponse] = []
    with anyio.fail_after(30):
        async for event in client.send_message(SendMessageRequest(message=msg)):
            events.append(event)
    return events


async def test_card_send_stream_lookup_and_strict_payloads(
    sdk: tuple[Sdk, Any],
    kit: Any,
) -> None:
    harness, transport = sdk
    card = harness.card
    assert card.capabilities.streaming
    assert [(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        ("JSONRPC", "1.0"),
        ("HTTP+JSON", "1.0"),
        ("JSONRPC", "0.3.0"),  # for A2A 0.3 clients (test_v03_client.py)
        ("HTTP+JSON", "0.3.0"),
    ]
    assert card.supported_interfaces[0].url == harness.server.url
    assert card.skills[0].id == "task"
    extension = next(e for e in card.capabilities.extensions if e.uri == EXTENSION)
    assert MessageToDict(extension.params) == {"depthLimit": True, "progress": True}
    assert not card.security_requirements  # loopback, no token

    # send (no streaming): the answer comes back as a completed task
    (reply,) = await collect(harness.client(streaming=False), kit.user_message("say hello"))
    assert reply.WhichOneof("payload") == "task"
    task = reply.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert kit.artifact_text(task) == "Done: say hello"
    assert MessageToDict(task.metadata)["dsh"]["usage"]["output_tokens"] == 3

    # stream: the task, working, three text chunks of one artifact, usage, completed
    events = await collect(harness.client(), kit.user_message("stream this"))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task", kinds
    assert kinds[-1] == "status_update", kinds
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert "".join(p.text for c in chunks for p in c.artifact.parts) == "Done: stream this"
    assert [c.append for c in chunks] == [False, True, True]
    assert {c.artifact.artifact_id for c in chunks} == {"response"}
    progress = [
        MessageToDict(e.status_update.metadata)["dsh"]["progress"]
        for e in events
        if e.HasField("status_update")
        and "dsh" in e.status_update.metadata.fields
        and "progress" in e.status_update.metadata["dsh"].fields
    ]
    assert [p["kind"] for p in progress] == ["usage"]
    final = events[-1].status_update
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert MessageToDict(final.metadata)["dsh"]["stopReason"] == "completed"

    # lookup: the stored task has the user's message, the answer, and the usage
    task_id = events[0].task.id
    stored = await harness.client().get_task(GetTaskRequest(id=task_id))
    assert stored.status.state == TaskState.TASK_STATE_COMPLETED
    assert kit.artifact_text(stored) == "Done: stream this"
    assert [m.parts[0].text for m in stored.history if m.role == Role.ROLE_USER] == ["stream this"]
    assert MessageToDict(stored.metadata)["dsh"]["usage"]["output_tokens"] == 3

    counts = kit.validate_exchanges(transport.exchanges)
    assert counts["AgentCard"] == 1
    assert counts["SendMessage"] == 1
    assert counts["SendStreamingMessage event"] == len(events)
    assert counts["GetTask"] == 1


async def test_cancel_in_the_middle_of_a_stream(sdk: tuple[Sdk, Any], kit: Any) -> None:
    harness, transport = sdk
    client = harness.client()
    events: list[StreamResponse] = []
    cancelled: Task | None = None
    with anyio.fail_after(30):
        async for event in client.send_message(
            SendMessageRequest(message=kit.user_message("please hang"))
        ):
            events.append(event)
            if event.HasField("status_update") and (
                event.status_update.status.state == TaskState.TASK_STATE_WORKING
                and cancelled is None
            ):
                cancelled = await harness.client().cancel_task(
                    CancelTaskRequest(id=event.status_update.task_id)
                )
    assert cancelled is not None
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    final = events[-1]
    assert final.HasField("status_update"), final
    assert final.status_update.status.state == TaskState.TASK_STATE_CANCELED
    assert final.status_update.status.message.parts[0].text == "cancelled by the A2A client"
    stored = await client.get_task(GetTaskRequest(id=events[0].task.id))
    assert stored.status.state == TaskState.TASK_STATE_CANCELED
    assert MessageToDict(stored.metadata)["dsh"]["stopReason"] == "aborted"
    counts = kit.validate_exchanges(transport.exchanges)
    assert counts["CancelTask"] == 1
    assert counts["GetTask"] == 1


async def test_a_failed_turn_and_a_refused_depth(sdk: tuple[Sdk, Any], kit: Any) -> None:
    harness, transport = sdk
    events = await collect(harness.client(), kit.user_message("please fail"))
    final = events[-1].status_update
    assert final.status.state == TaskState.TASK_STATE_FAILED
    assert "the scripted model fails on purpose" in final.status.message.parts[0].text
    assert MessageToDict(final.metadata)["dsh"]["stopReason"] == "error"

    deep = kit.user_message("say hello", meta={"dsh": {"depth": 4, "maxDepth": 3}})
    events = await collect(harness.client(), deep)
    final = events[-1].status_update
    assert final.status.state == TaskState.TASK_STATE_REJECTED
    assert final.status.message.parts[0].text == "subagent depth 4 exceeds max_depth 3"
    kit.validate_exchanges(transport.exchanges)


async def test_a_context_continues_its_conversation(
    tmp_path: Path, keyed_preset: Path, kit: Any
) -> None:
    sessions = tmp_path / "sessions"
    server = kit.start_server(tmp_path, keyed_preset, "--sessions-dir", str(sessions))
    try:
        transport = kit.RecordingTransport()
        async with httpx.AsyncClient(transport=transport, timeout=None) as http:
            card = await A2ACardResolver(http, server.url).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
            first = await collect(client, kit.user_message("one"))
            context_id = first[0].task.context_id
            second = await collect(client, kit.user_message("two", context_id=context_id))
            assert second[0].task.context_id == context_id
            assert second[0].task.id != first[0].task.id
            await collect(client, kit.user_message("three"))  # another context: another agent
        kit.validate_exchanges(transport.exchanges)
    finally:
        assert server.stop() == 143
    files = sorted(sessions.glob("*.jsonl"))
    assert len(files) == 2, files
    turns = sorted(f.read_text().count('"type":"turn/end"') for f in files)
    assert turns == [1, 2]
