"""An A2A 0.3 client drives a real ``dsh a2a`` process: the A2A SDK's 0.3 client (its
``CompatJsonRpcTransport`` and ``CompatRestTransport``, which speak the 0.3 wire format:
``message/send``, ``message/stream``, ``tasks/get``, ``tasks/cancel``, and REST
``/v1/message:send``) at the URL the card gives a 0.3 client, after checking the card
as a 0.3 client does (the 0.3 ``AgentCard`` model requires ``url``). Every JSON-RPC
payload it receives parses into the 0.3 types."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.compat.v0_3.rest_transport import CompatRestTransport
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from dsh.a2a import LINEAGE_EXTENSION_URI

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@pytest.fixture
async def v03(server: Any, kit: Any) -> AsyncIterator[tuple[types_v03.AgentCard, Any, Any]]:
    """The card as a 0.3 client reads it, the recording transport, and the HTTP client."""
    transport = kit.RecordingTransport()
    async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(30, read=None)) as http:
        raw = (await http.get(server.url + ".well-known/agent-card.json")).json()
        card = types_v03.AgentCard.model_validate(raw)
        yield card, transport, http


def message(text: str, kit: Any) -> SendMessageRequest:
    return SendMessageRequest(message=kit.user_message(text))


def check_v03_payloads(kit: Any, exchanges: list[Any]) -> dict[str, int]:
    """Every JSON-RPC answer parses as the 0.3 response of its method; counts by method."""
    answers: dict[str, Any] = {
        "message/send": types_v03.SendMessageResponse,
        "message/stream": types_v03.SendStreamingMessageResponse,
        "tasks/get": types_v03.GetTaskResponse,
        "tasks/cancel": types_v03.CancelTaskResponse,
    }
    counts: dict[str, int] = {}
    for exchange in exchanges:
        if exchange.method != "POST" or "/rest/" in exchange.url:
            continue
        method = exchange.request["method"]
        bodies = (
            kit.sse_data(exchange.body)
            if "text/event-stream" in exchange.content_type
            else [exchange.body.decode()]
        )
        for body in bodies:
            envelope = json.loads(body)
            assert "error" not in envelope, envelope
            parsed = answers[method].model_validate(envelope).root
            assert not isinstance(parsed, types_v03.JSONRPCErrorResponse), envelope
            counts[method] = counts.get(method, 0) + 1
    return counts


async def test_the_card_validates_for_a_0_3_client(
    v03: tuple[types_v03.AgentCard, Any, Any], server: Any
) -> None:
    card, _, _ = v03
    assert card.url == server.url
    assert card.preferred_transport == "JSONRPC"
    assert card.protocol_version == "0.3.0"
    assert [(i.transport, i.url) for i in card.additional_interfaces or []] == [
        ("HTTP+JSON", server.url + "rest")
    ]
    assert card.capabilities.streaming
    extensions = card.capabilities.extensions or []
    assert [e.params for e in extensions if e.uri == LINEAGE_EXTENSION_URI] == [
        {"depthLimit": True, "progress": True}
    ]
    assert card.skills[0].id == "task"


async def test_send_stream_get_and_cancel_over_0_3_json_rpc(
    v03: tuple[types_v03.AgentCard, Any, Any], kit: Any
) -> None:
    card, transport, http = v03
    client = CompatJsonRpcTransport(http, None, card.url, is_shared_httpx=True)

    # message/send: blocks until the task is done
    with anyio.fail_after(30):
        sent = await client.send_message(message("say hello", kit))
    assert sent.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert kit.artifact_text(sent.task) == "Done: say hello"
    assert MessageToDict(sent.task.metadata)["dsh"]["usage"]["output_tokens"] == 3

    # message/stream: the task, working, the text in chunks, completed (final)
    events: list[StreamResponse] = []
    with anyio.fail_after(30):
        async for event in client.send_message_streaming(message("stream this", kit)):
            events.append(event)
    assert events[0].HasField("task")
    final = events[-1].status_update
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert "".join(p.text for c in chunks for p in c.artifact.parts) == "Done: stream this"

    # tasks/get
    task_id = events[0].task.id
    stored = await client.get_task(GetTaskRequest(id=task_id))
    assert stored.status.state == TaskState.TASK_STATE_COMPLETED
    assert kit.artifact_text(stored) == "Done: stream this"

    # tasks/cancel in the middle of a stream: the answer and the stream both say canceled
    answer: Task | None = None
    states: list[int] = []
    with anyio.fail_after(30):
        async for event in client.send_message_streaming(message("please hang", kit)):
            if event.HasField("task"):
                states.append(event.task.status.state)
            elif event.HasField("status_update"):
                states.append(event.status_update.status.state)
                if answer is None and states[-1] == TaskState.TASK_STATE_WORKING:
                    answer = await client.cancel_task(
                        CancelTaskRequest(id=event.status_update.task_id)
                    )
    assert answer is not None
    assert answer.status.state == TaskState.TASK_STATE_CANCELED
    assert states[-1] == TaskState.TASK_STATE_CANCELED, states

    # the 0.3 wire format itself: kinds, and the stream's last event marked final
    stream = next(
        e for e in transport.exchanges if e.request and e.request.get("method") == "message/stream"
    )
    last = json.loads(kit.sse_data(stream.body)[-1])["result"]
    assert (last["kind"], last["final"], last["status"]["state"]) == (
        "status-update",
        True,
        "completed",
    )
    counts = check_v03_payloads(kit, transport.exchanges)
    assert counts["message/send"] == 1
    assert counts["tasks/get"] == 1
    assert counts["tasks/cancel"] == 1
    assert counts["message/stream"] == len(events) + len(states)


async def test_send_and_get_over_0_3_rest(
    v03: tuple[types_v03.AgentCard, Any, Any], kit: Any
) -> None:
    card, _, http = v03
    (rest,) = [i for i in card.additional_interfaces or [] if i.transport == "HTTP+JSON"]
    client = CompatRestTransport(http, None, rest.url, is_shared_httpx=True)
    sent = await client.send_message(message("over rest", kit))  # 0.3 REST: blocking defaults off
    with anyio.fail_after(30):
        while True:
            stored = await client.get_task(GetTaskRequest(id=sent.task.id))
            if stored.status.state == TaskState.TASK_STATE_COMPLETED:
                break
            await anyio.sleep(0.05)
    assert kit.artifact_text(stored) == "Done: over rest"
