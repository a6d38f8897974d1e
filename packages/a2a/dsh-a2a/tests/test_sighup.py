"""SIGHUP (the terminal that started ``dsh a2a`` closed) stops the server like SIGTERM
(issue 21 item 6): the running task ends ``canceled``, the process the agent's tool
started is gone, and the server exits 129 (128 + SIGHUP) promptly, without a
traceback."""

from __future__ import annotations

import os
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

from dsh.testing.processes import alive, wait_until_gone

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


async def test_sighup_cancels_the_task_kills_its_processes_and_exits_129(
    tmp_path: Path, kit: Any
) -> None:
    pid_file = tmp_path / "tool.pid"
    preset = kit.command_tool_preset(
        tmp_path, f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 120"
    )
    server = kit.start_server(tmp_path, preset)
    events: list[StreamResponse] = []
    tool_pid = 0
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None)) as http:
            card = await A2ACardResolver(http, server.url).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
            msg = Message(
                role=Role.ROLE_USER,
                message_id=uuid.uuid4().hex,
                parts=[Part(text="please run the script")],
            )

            async def follow() -> None:
                async for event in client.send_message(SendMessageRequest(message=msg)):
                    events.append(event)

            with anyio.fail_after(40):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(follow)
                    while not pid_file.exists():
                        assert server.process.poll() is None, server.stderr
                        await anyio.sleep(0.05)
                    tool_pid = int(pid_file.read_text())
                    assert alive(tool_pid)
                    server.process.send_signal(signal.SIGHUP)
                    signalled = time.monotonic()
        status = await anyio.to_thread.run_sync(server.process.wait, 20)
        elapsed = time.monotonic() - signalled
    finally:
        server.stop(signal.SIGKILL)
        if tool_pid and alive(tool_pid):
            os.kill(tool_pid, signal.SIGKILL)
    assert status == 129, server.stderr
    assert elapsed < 10, elapsed
    assert wait_until_gone([tool_pid], 10) < 10  # the tool's process went with the server
    final = events[-1].status_update
    assert final.status.state == TaskState.TASK_STATE_CANCELED
    assert final.status.message.parts[0].text == "dsh a2a is shutting down"
    assert "Traceback" not in server.stderr, server.stderr
