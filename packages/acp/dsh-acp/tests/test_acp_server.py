"""``dsh acp`` as a real child process, driven by a real ACP client connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import PROTOCOL_VERSION, Client, RequestError
from acp.core import ClientSideConnection
from acp.schema import (
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallUpdate,
)

from dsh.testing._acp_fixtures import ECHO_TOOL_RULE, hello_preset
from dsh.testing.fixtures import FAIL_RULE, HANG_RULE, dsh_acp_child, plugin_rows

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

PRESET = hello_preset(
    ECHO_TOOL_RULE, HANG_RULE, FAIL_RULE, chunks=4, plugins=plugin_rows("dsh-testing-example")
)


class Recorder(Client):
    """A client that records every raw session/update, in wire order."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []

    def observe(self, event: Any) -> None:
        message = event.message
        if event.direction == "incoming" and message.get("method") == "session/update":
            self.updates.append(message["params"]["update"])

    def kinds(self) -> list[str]:
        return [u["sessionUpdate"] for u in self.updates]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u["content"]["text"] for u in self.updates if u["sessionUpdate"] == kind)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kw: Any
    ) -> RequestPermissionResponse:
        raise RequestError.method_not_found("session/request_permission")


class Server:
    def __init__(self, process: asyncio.subprocess.Process, conn: ClientSideConnection) -> None:
        self.process = process
        self.conn = conn


@asynccontextmanager
async def dsh_acp(
    tmp_path: Path, recorder: Recorder, *extra: str, preset: str = PRESET
) -> AsyncIterator[Server]:
    """Spawn ``python -m dsh.cli acp --preset P [extra]`` and connect a client to it."""
    preset_file = tmp_path / "agent.toml"
    preset_file.write_text(preset, encoding="utf-8")
    args = ["--preset", str(preset_file), *extra]
    with open(tmp_path / "dsh-acp.stderr", "ab") as stderr:
        async with dsh_acp_child(
            recorder,
            *args,
            cwd=tmp_path,
            stderr=stderr,
            exit_bound=10,
            observers=[recorder.observe],
        ) as (conn, process):
            yield Server(process, conn)
    assert process.returncode == 0, (tmp_path / "dsh-acp.stderr").read_text()


async def _initialize(conn: ClientSideConnection) -> Any:
    with anyio.fail_after(30):
        return await conn.initialize(protocol_version=PROTOCOL_VERSION)


async def test_initialize_new_session_and_streamed_prompt(tmp_path: Path) -> None:
    recorder = Recorder()
    async with dsh_acp(tmp_path, recorder) as server:
        init = await _initialize(server.conn)
        assert init.protocol_version == PROTOCOL_VERSION
        assert init.agent_info is not None
        assert init.agent_info.name == "dsh"
        assert init.agent_capabilities is not None
        assert init.agent_capabilities.load_session is False  # no sessions dir
        session = await server.conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        response = await server.conn.prompt(
            session_id=session.session_id, prompt=[TextContentBlock(type="text", text="hi there")]
        )
    assert response.stop_reason == "end_turn"
    assert response.usage is not None
    assert response.usage.output_tokens == 5
    chunks = [u for u in recorder.updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert len(chunks) == 4  # streamed as the model produced it, not one blob
    assert recorder.text() == "Hello from dsh: hi there"
    assert len({c["messageId"] for c in chunks}) == 1


async def test_tool_calls_are_reported_as_tool_call_updates(tmp_path: Path) -> None:
    recorder = Recorder()
    async with dsh_acp(tmp_path, recorder) as server:
        await _initialize(server.conn)
        session = await server.conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        response = await server.conn.prompt(
            session_id=session.session_id,
            prompt=[TextContentBlock(type="text", text="please use the tool")],
        )
    assert response.stop_reason == "end_turn"
    assert recorder.kinds() == [
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
        "agent_message_chunk",
    ]
    call, result = recorder.updates[0], recorder.updates[1]
    assert call["title"] == 'echo {"text": "ping"}'  # as its permission request would say
    assert call["status"] == "pending"
    assert call["rawInput"] == {"text": "ping"}
    assert result["toolCallId"] == call["toolCallId"]
    assert result["status"] == "completed"
    assert result["content"][0]["content"] == {"type": "text", "text": "echo: ping"}
    assert recorder.text() == "The tool said: echo: ping"


async def test_cancel_ends_the_turn_cancelled_and_the_session_goes_on(tmp_path: Path) -> None:
    recorder = Recorder()
    async with dsh_acp(tmp_path, recorder) as server:
        await _initialize(server.conn)
        session = await server.conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        sid = session.session_id
        turn = asyncio.ensure_future(
            server.conn.prompt(
                session_id=sid, prompt=[TextContentBlock(type="text", text="please hang")]
            )
        )
        await anyio.sleep(0.5)
        assert not turn.done()
        await server.conn.cancel(session_id=sid)
        with anyio.fail_after(5):
            response = await turn
        assert response.stop_reason == "cancelled"
        again = await server.conn.prompt(
            session_id=sid, prompt=[TextContentBlock(type="text", text="still there?")]
        )
        assert again.stop_reason == "end_turn"
    assert recorder.text() == "Hello from dsh: still there?"


async def test_a_failed_turn_answers_with_an_error(tmp_path: Path) -> None:
    recorder = Recorder()
    async with dsh_acp(tmp_path, recorder) as server:
        await _initialize(server.conn)
        session = await server.conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        with pytest.raises(RequestError) as info:
            await server.conn.prompt(
                session_id=session.session_id, prompt=[TextContentBlock(type="text", text="fail")]
            )
    assert info.value.code == -32603
    assert str(info.value) == (
        "dsh turn error: model call failed: the scripted model fails on purpose"
    )
    assert info.value.data == {
        "stopReason": "error",
        "error": "model call failed: the scripted model fails on purpose",
    }


async def test_load_session_replays_history_and_continues(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    work = tmp_path / "work"
    work.mkdir()
    first = Recorder()
    async with dsh_acp(tmp_path, first, "--sessions-dir", str(sessions)) as server:
        init = await _initialize(server.conn)
        assert init.agent_capabilities is not None
        assert init.agent_capabilities.load_session
        session = await server.conn.new_session(cwd=str(work), mcp_servers=[])
        sid = session.session_id
        await server.conn.prompt(
            session_id=sid, prompt=[TextContentBlock(type="text", text="please use the tool")]
        )
    header = json.loads((sessions / f"{sid}.jsonl").read_text().splitlines()[0])
    assert header["meta"]["cwd"] == str(work)
    assert header["meta"]["origin"] == "acp"

    second = Recorder()
    async with dsh_acp(tmp_path, second, "--sessions-dir", str(sessions)) as server:
        await _initialize(server.conn)
        await server.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        replayed = list(second.updates)
        with pytest.raises(RequestError) as info:
            await server.conn.load_session(cwd=str(work), session_id="nope", mcp_servers=[])
        assert info.value.code == -32002  # resource not found
        second.updates.clear()
        response = await server.conn.prompt(
            session_id=sid, prompt=[TextContentBlock(type="text", text="and now?")]
        )
    assert [u["sessionUpdate"] for u in replayed] == [
        "user_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    assert replayed[0]["content"]["text"] == "please use the tool"
    assert replayed[3]["content"]["text"] == "The tool said: echo: ping"
    assert [u["sessionUpdate"] for u in first.updates][:2] == ["tool_call", "tool_call_update"]
    assert replayed[1]["toolCallId"] == first.updates[0]["toolCallId"]
    assert response.stop_reason == "end_turn"
    assert second.text() == "Hello from dsh: and now?"
    events = [json.loads(line) for line in (sessions / f"{sid}.jsonl").read_text().splitlines()]
    assert [e["type"] for e in events[1:]].count("turn/end") == 2


async def test_unsupported_methods_answer_method_not_found(tmp_path: Path) -> None:
    recorder = Recorder()
    async with dsh_acp(tmp_path, recorder) as server:
        await _initialize(server.conn)
        session = await server.conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        calls = [
            server.conn.load_session(cwd=str(tmp_path), session_id=session.session_id),
            server.conn.list_sessions(),
            server.conn.set_session_mode(session_id=session.session_id, mode_id="x"),
            server.conn.authenticate(method_id="x"),
        ]
        for call in calls:
            with pytest.raises(RequestError) as info:
                await call
            assert info.value.code == -32601
        with pytest.raises(RequestError) as info:
            await server.conn.new_session(cwd="relative/dir", mcp_servers=[])
        assert info.value.code == -32602
        with pytest.raises(RequestError) as info:
            await server.conn.prompt(
                session_id="unknown", prompt=[TextContentBlock(type="text", text="x")]
            )
        assert info.value.code == -32602


async def test_without_a_model_it_still_answers_initialize_and_says_what_to_fix(
    tmp_path: Path,
) -> None:
    """An editor shows "connection closed" if the agent exits before initialize: so a
    configuration problem becomes the error of session/new, saying what to fix."""
    recorder = Recorder()
    async with dsh_acp(tmp_path, recorder, preset="[agent]\n") as server:
        init = await _initialize(server.conn)
        assert init.protocol_version == PROTOCOL_VERSION
        with pytest.raises(RequestError) as info:
            await server.conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        assert info.value.code == -32603
        assert "dsh acp cannot start a session: no model is configured" in str(info.value)
        assert "[agent.model]" in str(info.value)


async def test_an_unloadable_preset_still_answers_initialize(tmp_path: Path) -> None:
    recorder = Recorder()
    preset = '[agent.model]\nadapter = "scripted"\n\n[[plugin]]\nname = "dsh-no-such-plugin"\n'
    async with dsh_acp(tmp_path, recorder, preset=preset) as server:
        await _initialize(server.conn)
        with pytest.raises(RequestError) as info:
            await server.conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        message = str(info.value)
        assert 'unknown plugin "dsh-no-such-plugin"' in message
        assert "installed:" in message
