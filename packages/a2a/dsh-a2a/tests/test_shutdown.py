"""SIGTERM: the running task (whose agent is waiting on a nested delegation) ends
``canceled`` for the client that follows it, the delegation is disposed, and the server
exits 143 promptly."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse, TaskState
from google.protobuf.json_format import MessageToDict

from dsh.testing.fixtures import HANG_RULE, SPAWN_SUBAGENT_TOOL, delegate_rule, keyed_preset

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

DELEGATING = keyed_preset(
    delegate_rule("hang here"), HANG_RULE, default=None, plugins=SPAWN_SUBAGENT_TOOL
)


def progress_of(event: StreamResponse) -> dict[str, Any] | None:
    if not event.HasField("status_update"):
        return None
    meta = MessageToDict(event.status_update.metadata).get("dsh", {})
    item = meta.get("progress")
    return item if isinstance(item, dict) else None


async def test_sigterm_cancels_tasks_disposes_delegations_and_exits(
    tmp_path: Path, kit: Any
) -> None:
    preset = tmp_path / "delegating.toml"
    preset.write_text(DELEGATING)
    server = kit.start_server(tmp_path, preset)
    events: list[StreamResponse] = []
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None)) as http:
            card = await A2ACardResolver(http, server.url).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
            msg = Message(
                role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text="delegate")]
            )
            signalled: float | None = None
            with anyio.fail_after(30):
                async for event in client.send_message(SendMessageRequest(message=msg)):
                    events.append(event)
                    item = progress_of(event)
                    if item is not None and item["kind"] == "child_start" and signalled is None:
                        server.process.send_signal(signal.SIGTERM)
                        signalled = time.monotonic()
        assert signalled is not None, events
        assert server.stop(bound=15) == 143
        elapsed = time.monotonic() - signalled
    finally:
        server.stop(signal.SIGKILL)
    assert elapsed < 10, elapsed
    final = events[-1].status_update
    assert final.status.state == TaskState.TASK_STATE_CANCELED
    assert final.status.message.parts[0].text == "dsh a2a is shutting down"
    ends = [item for e in events if (item := progress_of(e)) and item["kind"] == "child_end"]
    assert [(e["path"], e["stop_reason"]) for e in ends] == [([ends[0]["run_id"]], "aborted")]
    assert "Traceback" not in server.stderr, server.stderr
