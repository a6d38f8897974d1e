"""``dsh acp --workspace client`` (issue 26 item 4): with a client that offers ``fs`` and
``terminal``, the agent's file and shell tools become client requests. Two clients: the
Python SDK in process, and the TypeScript SDK (``acp_sdk_fs_client.mjs``; skipped
locally without ``tools/install-acp-sdk.sh``, a failure under CI).

Driven by the official ``acp`` SDK client against a real ``dsh acp`` process whose
model (a fake OpenAI chat server) writes a file, edits it, reads it and runs a
command. The client keeps files in memory and fakes its terminal: what reaches the
disk or a process is nothing, so every effect the model sees went through it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import PROTOCOL_VERSION, Client, connect_to_agent
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    FileSystemCapabilities,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalOutputResponse,
    TextContentBlock,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from dsh.testing.model_servers import ChatReply, ChatToolCall, OpenAIChatServer
from dsh.testing.model_servers._http import RecordedRequest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PRESET = """
extends = "standard"

[agent.model]
adapter = "openai"
model = "client-workspace"
options = {{ base_url = "{api_base}", api_key_env = "", read_timeout = 30.0 }}
"""

STEPS = [
    ChatToolCall("write_file", {"path": "notes.txt", "content": "hello world\n"}, "call_1"),
    ChatToolCall(
        "edit_file", {"path": "notes.txt", "old_string": "world", "new_string": "editor"}, "call_2"
    ),
    ChatToolCall("read_file", {"path": "notes.txt"}, "call_3"),
    ChatToolCall("shell", {"command": "make test"}, "call_4"),
]


def _tool_results(request: RecordedRequest) -> list[str]:
    body = request.json if isinstance(request.json, Mapping) else {}
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    return [str(m.get("content")) for m in messages if m.get("role") == "tool"]


def script(request: RecordedRequest) -> ChatReply:
    step = len(_tool_results(request))
    if step < len(STEPS):
        return ChatReply(tool_calls=[STEPS[step]])
    return ChatReply(text="done")


class Editor(Client):
    """Files in memory, a fake terminal, every permission allowed; logs every request."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.log: list[tuple[str, Any]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kw: Any
    ) -> RequestPermissionResponse:
        self.log.append(("ask", tool_call.title))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id="allow_once")
        )

    async def write_text_file(
        self, content: str, path: str, session_id: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        self.log.append(("write", path))
        self.files[path] = content
        return WriteTextFileResponse()

    async def read_text_file(
        self, path: str, session_id: str, limit: int | None = None, line: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:  # fmt: skip
        self.log.append(("read", path))
        return ReadTextFileResponse(content=self.files[path])

    async def create_terminal(
        self, command: str, session_id: str, args: list[str] | None = None, **kwargs: Any
    ) -> CreateTerminalResponse:
        self.log.append(("terminal", [command, *(args or [])]))
        return CreateTerminalResponse(terminal_id="t-1")

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        return WaitForTerminalExitResponse(exit_code=0)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        return TerminalOutputResponse(output="all tests passed\n", truncated=False)

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        self.log.append(("release", terminal_id))
        return ReleaseTerminalResponse()


async def test_file_and_shell_tools_go_through_the_client(tmp_path: Path) -> None:
    editor = Editor()
    with OpenAIChatServer(default=script) as server:
        preset = tmp_path / "agent.toml"
        preset.write_text(PRESET.format(api_base=server.api_base), encoding="utf-8")
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dsh.cli", "acp", "--preset", str(preset),
            "--workspace", "client",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=tmp_path,
        )  # fmt: skip
        assert process.stdin is not None
        assert process.stdout is not None
        conn = connect_to_agent(editor, process.stdin, process.stdout)
        try:
            caps = ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                terminal=True,
            )
            with anyio.fail_after(30):
                await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=caps)
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
        results = _tool_results(server.requests[-1])

    notes = str(tmp_path / "notes.txt")
    assert editor.files == {notes: "hello editor\n"}
    assert not (tmp_path / "notes.txt").exists()  # dsh wrote nothing itself
    assert editor.log == [
        ("ask", "Write notes.txt"),
        ("write", notes),
        ("ask", "Edit notes.txt"),
        ("read", notes),
        ("write", notes),
        ("read", notes),
        ("ask", "Run `make test`"),
        ("terminal", ["/bin/sh", "-c", "exec 2>&1\nmake test"]),
        ("release", "t-1"),
    ]
    assert "through the editor" in results[0]
    assert results[2] == "hello editor\n"
    assert results[3] == "all tests passed\n[exit status 0]"


SDK_CLIENT = Path(__file__).with_name("acp_sdk_fs_client.mjs")
DEFAULT_SDK = Path(__file__).resolve().parents[4] / ".tools" / "acp-sdk" / "node_modules"


def _sdk_dir() -> Path:
    """The TypeScript SDK (tools/install-acp-sdk.sh), or a skip (a failure under CI)."""
    configured = os.environ.get("DSH_ACP_SDK_DIR")
    sdk = Path(configured) if configured else DEFAULT_SDK / "@agentclientprotocol" / "sdk"
    problem = None
    if shutil.which("node") is None:
        problem = "node is not on PATH"
    elif not (sdk / "package.json").is_file():
        problem = f"@agentclientprotocol/sdk not found at {sdk}; run tools/install-acp-sdk.sh"
    if problem is not None:
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(problem)
        pytest.skip(problem)
    return sdk


def test_the_typescript_sdk_client_gets_the_writes_as_fs_requests(tmp_path: Path) -> None:
    sdk = _sdk_dir()
    with OpenAIChatServer(default=script) as server:
        preset = tmp_path / "agent.toml"
        preset.write_text(PRESET.format(api_base=server.api_base), encoding="utf-8")
        agent = [sys.executable, "-m", "dsh.cli", "acp", "--preset", str(preset)]
        agent += ["--workspace", "client"]
        done = subprocess.run(
            ["node", str(SDK_CLIENT), str(sdk), str(tmp_path), "--", *agent],
            cwd=tmp_path, capture_output=True, text=True, timeout=100, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["stopReason"] == "end_turn"
    assert result["exitCode"] == 0
    notes = str(tmp_path / "notes.txt")
    assert result["files"] == {notes: "hello editor\n"}
    assert not (tmp_path / "notes.txt").exists()
    methods = [r["method"] for r in result["requests"]]
    assert methods == [
        "session/request_permission",
        "fs/write_text_file",
        "session/request_permission",
        "fs/read_text_file",
        "fs/write_text_file",
        "fs/read_text_file",
        "session/request_permission",
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
    ]
    writes = [r["params"] for r in result["requests"] if r["method"] == "fs/write_text_file"]
    assert writes == [
        {"path": notes, "content": "hello world\n"},
        {"path": notes, "content": "hello editor\n"},
    ]
