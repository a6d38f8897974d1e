"""``dsh acp`` tool calls as an editor sees them (issue 21 item 12), driven by the
official ``acp`` SDK client against a real ``dsh acp`` process whose model is a fake
OpenAI chat server on 127.0.0.1 that numbers tool calls per response (``call_0``...,
as many OpenAI-compatible servers do).

* ``initialize`` advertises ``mcpCapabilities`` http and sse (HTTP servers are accepted);
* every permission request comes after the ``tool_call`` update of the same
  ``toolCallId``, with the same ``kind``;
* each tool call has the kind of its tool (shell: execute, read_file: read);
* tool call ids are unique in the session, the lead's and its in-process child's alike.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import PROTOCOL_VERSION, Client, connect_to_agent
from acp.schema import (
    AllowedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer
from dsh.testing.model_servers._http import RecordedRequest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PRESET = """
extends = "standard"

[agent.model]
adapter = "openai"
model = "tool-calls"
options = {{ base_url = "{api_base}", api_key_env = "", read_timeout = 30.0 }}
"""

CHILD = "CHILD: look around"


def _messages(request: RecordedRequest) -> list[Mapping[str, Any]]:
    body = request.json if isinstance(request.json, Mapping) else {}
    return [m for m in body.get("messages") or [] if isinstance(m, Mapping)]


def script(request: RecordedRequest) -> ChatReply:
    """Lead: shell, read_file, subagent, then text; child: shell, then text. Each
    response numbers its calls from call_0, so the child's first id is the lead's."""
    messages = _messages(request)
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    step = sum(1 for m in messages[last_user + 1 :] if m.get("role") == "assistant")
    if CHILD in str(messages[last_user].get("content")):
        if step == 0:
            return ChatReply(
                tool_calls=[ChatToolCall("shell", {"command": "echo child"}, "call_0")]
            )
        return ChatReply(text="child done")
    lead = [
        ChatToolCall("shell", {"command": "echo lead"}, "call_0"),
        ChatToolCall("read_file", {"path": "notes.txt"}, "call_0"),
        ChatToolCall("subagent", {"description": "helper", "prompt": CHILD}, "call_0"),
    ]
    if step < len(lead):
        return ChatReply(tool_calls=[lead[step]])
    return ChatReply(text="lead done")


class Recorder(Client):
    """Allows every permission; records tool call updates and permission requests in
    the order they arrive."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str, str | None, str | None]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, ToolCallStart):
            self.log.append(("start", update.tool_call_id, update.kind, update.status))
        elif isinstance(update, ToolCallProgress):
            self.log.append(("update", update.tool_call_id, update.kind, update.status))

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kw: Any
    ) -> RequestPermissionResponse:
        self.log.append(("ask", tool_call.tool_call_id, tool_call.kind, tool_call.title))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id="allow_once")
        )


async def test_tool_calls_as_an_editor_sees_them(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("some notes\n", encoding="utf-8")
    recorder = Recorder()
    with OpenAIChatServer(default=script) as server:
        preset = tmp_path / "agent.toml"
        preset.write_text(PRESET.format(api_base=server.api_base), encoding="utf-8")
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dsh.cli", "acp", "--preset", str(preset),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=tmp_path,
        )  # fmt: skip
        assert process.stdin is not None
        assert process.stdout is not None
        conn = connect_to_agent(recorder, process.stdin, process.stdout)
        try:
            with anyio.fail_after(30):
                init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
            mcp = init.agent_capabilities.mcp_capabilities if init.agent_capabilities else None
            assert mcp is not None
            assert mcp.http
            assert mcp.sse
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            with anyio.fail_after(60):
                answer = await conn.prompt(
                    session_id=session.session_id, prompt=[TextContentBlock(type="text", text="go")]
                )
            assert answer.stop_reason == "end_turn"
        finally:
            with anyio.CancelScope(shield=True):
                await conn.close()
                process.stdin.close()
                with anyio.fail_after(15):
                    await process.wait()

    log = recorder.log
    starts = [entry for entry in log if entry[0] == "start"]
    asks = [entry for entry in log if entry[0] == "ask"]
    # the lead's shell and the child's shell asked; each after its own tool_call
    assert [title for *_, title in asks] == ["Run `echo lead`", "Run `echo child`"], log
    for ask in asks:
        at = log.index(ask)
        started = [e for e in log[:at] if e[0] == "start" and e[1] == ask[1]]
        assert len(started) == 1, (ask, log)
        assert started[0][2] == ask[2] == "execute", (ask, started, log)
    # ids unique in the session: every tool call started once
    ids = [entry[1] for entry in starts]
    assert len(ids) == len(set(ids)), log
    assert asks[0][1] != asks[1][1]
    # real kinds: the read is a read
    kinds = [entry[2] for entry in starts]
    assert "read" in kinds, log
    # every tool call that started also ended
    ended = {e[1] for e in log if e[0] == "update" and e[3] in ("completed", "failed")}
    assert set(ids) <= ended, log
