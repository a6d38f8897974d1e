"""``dsh acp`` as an editor uses it: MCP servers sent in ``session/new`` serve that
session only and end with it; ``ask`` permissions go to the client as
``session/request_permission``."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import PROTOCOL_VERSION, Client, connect_to_agent
from acp.core import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    EnvVariable,
    McpServerStdio,
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallUpdate,
)

from dsh.testing.fixtures import keyed_preset, keyed_rule, plugin_rows
from dsh.testing.processes import alive, cmdline, descendants

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

PRESET = keyed_preset(
    keyed_rule(
        "add",
        {"tool_calls": [{"name": "calc__add", "arguments": {"a": 40, "b": 2}}]},
        {"text": "The sum is {tool_results}"},
    ),
    keyed_rule(
        "shell",
        {"tool_calls": [{"name": "shell", "arguments": {"command": "echo ran-it"}}]},
        {"text": "Shell said: {tool_results}"},
    ),
    default=[{"text": "ok"}],
    plugins=plugin_rows("dsh-tool-shell"),
)


class Editor(Client):
    """A client that answers permission requests with ``answer`` and records them."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked: list[tuple[str | None, str | None, list[str]]] = []
        self.texts: dict[str, str] = {}

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            text = getattr(update.content, "text", "")
            self.texts[session_id] = self.texts.get(session_id, "") + text

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kw: Any
    ) -> RequestPermissionResponse:
        self.asked.append((tool_call.title, tool_call.kind, [o.kind for o in options]))
        if self.answer == "deny":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.answer)
        )


@asynccontextmanager
async def dsh_acp(
    tmp_path: Path, editor: Editor
) -> AsyncIterator[tuple[ClientSideConnection, int]]:
    preset = tmp_path / "agent.toml"
    preset.write_text(PRESET, encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dsh.cli", "acp", "--preset", str(preset),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    assert process.stdin is not None
    assert process.stdout is not None
    conn = connect_to_agent(editor, process.stdin, process.stdout)
    try:
        with anyio.fail_after(30):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
        yield conn, process.pid
    finally:
        with anyio.CancelScope(shield=True):
            await conn.close()
            process.stdin.close()
            with anyio.fail_after(15):
                await process.wait()


def _mcp_server() -> McpServerStdio:
    return McpServerStdio(
        name="calc",
        command=sys.executable,
        args=["-m", "dsh.testing.mcp_server"],
        env=[EnvVariable(name="CALC_MODE", value="test")],
    )


async def test_an_mcp_server_from_the_editor_serves_that_session_and_ends_with_it(
    tmp_path: Path,
) -> None:
    editor = Editor("allow_once")
    async with dsh_acp(tmp_path, editor) as (conn, pid):
        session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[_mcp_server()])
        servers = [
            p
            for p in descendants(pid)
            if "dsh.testing.mcp_server" in cmdline(p) and "bwrap" not in cmdline(p).split()[0]
        ]  # the server itself, not the bubblewrap processes around it
        assert len(servers) == 1
        with anyio.fail_after(30):
            answer = await conn.prompt(
                session_id=session.session_id, prompt=[TextContentBlock(type="text", text="add")]
            )
        assert answer.stop_reason == "end_turn"
        assert "The sum is 42" in editor.texts[session.session_id]
        assert editor.asked[0][0] is not None  # MCP tools ask by default
        other = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        with anyio.fail_after(30):
            plain = await conn.prompt(
                session_id=other.session_id, prompt=[TextContentBlock(type="text", text="add")]
            )
        assert plain.stop_reason == "end_turn"
        assert 'unknown tool "calc__add"' in editor.texts[other.session_id]  # not this session's
        await conn.close_session(session_id=session.session_id)
        with anyio.fail_after(5):
            while alive(servers[0]):
                await anyio.sleep(0.05)


async def test_an_ask_permission_goes_to_the_editor(tmp_path: Path) -> None:
    editor = Editor("deny")
    async with dsh_acp(tmp_path, editor) as (conn, _pid):
        session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        with anyio.fail_after(30):
            await conn.prompt(
                session_id=session.session_id, prompt=[TextContentBlock(type="text", text="shell")]
            )
    assert editor.asked == [
        ("Run `echo ran-it`", "execute", ["allow_once", "allow_always", "reject_once"])
    ]
