"""``dsh acp`` against what real clients send (issue 21 items 2, 5, 9, 15): lone UTF-16
surrogates, a client that stops reading, ``$/cancel_request`` as the ACP schema spells
it, floods of bad notifications, requests before ``initialize`` and a wrong ``jsonrpc``.

A real ``dsh acp`` process on pipes; its model a keyed scripted model, or a fake
OpenAI chat server on 127.0.0.1 (``dsh-llm-openai``, the real HTTP wire)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import Client, RequestError, connect_to_agent
from acp.schema import (
    CancelRequestNotification,
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallUpdate,
)

from dsh.testing._acp_fixtures import hello_preset
from dsh.testing.fixtures import HANG_RULE
from dsh.testing.model_servers import (
    ChatReply,
    ChatToolCall,
    OpenAIChatServer,
    StreamFaults,
    echo_last_user_message,
)
from dsh.testing.processes import ThreadlessJsonLinesProcess

pytestmark = pytest.mark.timeout(120)

KEYED = hello_preset(HANG_RULE)

OPENAI = """
[[plugin]]
name = "dsh-llm-openai"

[[plugin]]
name = "dsh-testing-example"

[agent.model]
adapter = "openai"
model = "robustness"
options = {{ base_url = "{api_base}", api_key_env = "", read_timeout = 30.0 }}
"""


class Acp(ThreadlessJsonLinesProcess):
    """``python -m dsh.cli acp`` on pipes; raw lines in, parsed lines out. No reader
    thread, so a test can close its read end for real (:meth:`close_output`)."""

    def __init__(self, tmp_path: Path, preset: str, *extra: str) -> None:
        preset_file = tmp_path / "agent.toml"
        preset_file.write_text(preset, encoding="utf-8")
        super().__init__(
            [sys.executable, "-m", "dsh.cli", "acp", "--preset", str(preset_file), *extra],
            tmp_path,
            tmp_path / "dsh-acp.stderr",
            name="dsh acp",
        )

    def initialize(self) -> None:
        answer = self.answer(self.request("initialize", {"protocolVersion": 1}))
        assert "result" in answer, answer

    def new_session(self, cwd: Path) -> str:
        answer = self.answer(self.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
        assert "result" in answer, answer
        return str(answer["result"]["sessionId"])

    def prompt(self, session_id: str, text: str) -> int:
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        return self.request("session/prompt", params)


@pytest.fixture
def acp(tmp_path: Path) -> Iterator[Acp]:
    server = Acp(tmp_path, KEYED)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def chat_server() -> Iterator[OpenAIChatServer]:
    server = OpenAIChatServer(default=echo_last_user_message("echo: ")).start()
    try:
        yield server
    finally:
        server.close()


def wait_for(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} (not within {timeout} s)"
        time.sleep(0.05)


# -- item 2: lone surrogates -----------------------------------------------------------


def test_a_lone_surrogate_id_is_answered_with_that_id_and_serving_goes_on(acp: Acp) -> None:
    acp.send(b'{"jsonrpc":"2.0","id":"\\ud800","method":"","params":{}}\n')
    answer = acp.receive()
    assert answer["id"] == "\ud800"  # echoed exactly (as a \ud800 escape)
    assert answer["error"]["code"] == -32600
    acp.initialize()
    acp.send(b'{"jsonrpc":"2.0","id":"\\udfff","method":"_x\\udfff","params":{}}\n')
    answer = acp.answer("\udfff")
    assert answer["error"]["code"] == -32601, answer
    acp.initialize()
    assert acp.process.poll() is None, acp.stderr()


def test_a_cut_off_emoji_does_not_poison_the_session(
    tmp_path: Path, chat_server: OpenAIChatServer
) -> None:
    sessions = tmp_path / "sessions"
    server = Acp(
        tmp_path, OPENAI.format(api_base=chat_server.api_base), "--sessions-dir", str(sessions)
    )
    try:
        server.initialize()
        session_id = server.new_session(tmp_path)
        # what a JavaScript client sends for a string cut inside a surrogate pair
        server.send(
            b'{"jsonrpc":"2.0","id":"cut","method":"session/prompt","params":{"sessionId":"'
            + session_id.encode()
            + b'","prompt":[{"type":"text","text":"hi \\ud83d"}]}}\n'
        )
        answer = server.answer("cut")
        assert answer.get("result", {}).get("stopReason") == "end_turn", answer
        assert chat_server.requests[-1].json["messages"][-1]["content"] == "hi \ufffd"
        for text in ("again", "and again"):
            answer = server.answer(server.prompt(session_id, text))
            assert answer.get("result", {}).get("stopReason") == "end_turn", answer
        assert len(chat_server.requests) == 3
        for path in sessions.rglob("*.jsonl"):  # the session file stays valid UTF-8 JSON
            for line in path.read_bytes().splitlines():
                json.loads(line.decode("utf-8"))
    finally:
        assert server.close() == 0, server.stderr()


# -- item 5: a client that stops reading -------------------------------------------------


def test_a_client_that_stops_reading_ends_the_server_and_its_model_calls(
    tmp_path: Path,
) -> None:
    def forever(request: Any) -> ChatReply:  # a slow turn that never ends by itself
        return ChatReply(
            text="still working on it " * 4,
            text_chunks=12,
            tool_calls=[ChatToolCall("echo", {"text": "again"})],
            faults=StreamFaults(delay=0.25),
        )

    chat_server = OpenAIChatServer(default=forever).start()
    server = Acp(tmp_path, OPENAI.format(api_base=chat_server.api_base))
    try:
        server.initialize()
        session_id = server.new_session(tmp_path)
        server.prompt(session_id, "work")
        while True:  # mid-stream: the model's text is arriving
            message = server.receive()
            if message.get("params", {}).get("update", {}).get("sessionUpdate") == (
                "agent_message_chunk"
            ):
                break
        calls = len(chat_server.requests)
        server.close_output()
        started = time.monotonic()
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"dsh acp still runs 15 s after its client stopped reading; model calls:"
                f" {calls} then {len(chat_server.requests)}"
            ) from None
        assert time.monotonic() - started < 10
        assert server.process.returncode == 0, server.stderr()
        time.sleep(1.0)
        assert len(chat_server.requests) == calls, "a model call was made for nobody"
        stderr = server.stderr()
        assert "writing to the ACP client failed" in stderr
        assert "Traceback" not in stderr, stderr
    finally:
        server.close()
        chat_server.close()


# -- item 9: $/cancel_request as the ACP schema spells it --------------------------------


def _cancel(request_id: Any, key: str = "requestId") -> bytes:
    params = {key: request_id}
    return json.dumps({"jsonrpc": "2.0", "method": "$/cancel_request", "params": params}).encode()


def test_cancel_request_cancels_a_running_prompt(acp: Acp, tmp_path: Path) -> None:
    acp.initialize()
    session_id = acp.new_session(tmp_path)
    for key in ("requestId", "id"):  # the schema's name; "id" as older dsh clients sent it
        request_id = acp.prompt(session_id, "hang")
        time.sleep(0.5)  # the turn is running (its model hangs)
        acp.send(_cancel(request_id, key) + b"\n")
        answer = acp.answer(request_id, timeout=15)
        assert answer.get("result", {}).get("stopReason") == "cancelled", (key, answer)
    answer = acp.answer(acp.prompt(session_id, "after"))  # the session goes on
    assert answer["result"]["stopReason"] == "end_turn", answer


def test_cancel_request_of_another_request_answers_request_cancelled(
    acp: Acp, tmp_path: Path
) -> None:
    acp.initialize()
    # session/new waits for its MCP server to start; this one never answers
    hanging = {
        "name": "slow",
        "command": sys.executable,
        "args": ["-c", "import time; time.sleep(300)"],
        "env": [],
    }
    request_id = acp.request("session/new", {"cwd": str(tmp_path), "mcpServers": [hanging]})
    time.sleep(1.0)
    started = time.monotonic()
    acp.send(_cancel(request_id) + b"\n")
    answer = acp.answer(request_id, timeout=15)
    assert answer.get("error", {}).get("code") == -32800, answer
    assert time.monotonic() - started < 10
    acp.new_session(tmp_path)  # serving goes on


class _Quiet(Client):
    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kw: Any
    ) -> RequestPermissionResponse:
        raise RequestError.method_not_found("session/request_permission")


@pytest.mark.anyio
async def test_the_sdk_clients_cancel_request_cancels_the_turn(tmp_path: Path) -> None:
    """The ``acp`` SDK defines ``CancelRequestNotification`` (``requestId``) but has no
    method that sends it: its own model goes out over its own connection."""
    preset_file = tmp_path / "agent.toml"
    preset_file.write_text(KEYED, encoding="utf-8")
    with open(tmp_path / "dsh-acp.stderr", "ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dsh.cli", "acp", "--preset", str(preset_file),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr,
        )  # fmt: skip
    assert process.stdin is not None
    assert process.stdout is not None
    prompts: list[Any] = []

    def observe(event: Any) -> None:
        if event.direction == "outgoing" and event.message.get("method") == "session/prompt":
            prompts.append(event.message["id"])

    conn = connect_to_agent(_Quiet(), process.stdin, process.stdout, observers=[observe])
    try:
        with anyio.fail_after(60):
            await conn.initialize(protocol_version=1)
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            turn = asyncio.create_task(
                conn.prompt(session.session_id, [TextContentBlock(type="text", text="hang")])
            )
            while not prompts:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            cancel = CancelRequestNotification(request_id=prompts[0])
            params = cancel.model_dump(mode="json", by_alias=True, exclude_none=True)
            assert params == {"requestId": prompts[0]}
            await conn._conn.send_notification("$/cancel_request", params)
        with anyio.fail_after(15):
            response = await turn
        assert response.stop_reason == "cancelled"
    finally:
        with anyio.CancelScope(shield=True):
            await conn.close()
            process.stdin.close()
            try:
                with anyio.fail_after(15):
                    await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()


# -- item 15: bad notifications, requests before initialize, jsonrpc -------------------


def test_bad_notifications_are_logged_one_line_each_and_rate_limited(acp: Acp) -> None:
    acp.initialize()
    bad = [
        b'{"jsonrpc":"2.0","method":"session/cancel","params":{}}',
        b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":5}}',
        b'{"jsonrpc":"2.0","method":"session/update","params":{"x":1}}',
    ]
    count = 3000
    acp.send(b"\n".join(bad[i % len(bad)] for i in range(count)) + b"\n")
    acp.initialize()  # every notification before it has been handled
    wait_for(lambda: "suppressed" in acp.stderr(), "a count of the suppressed lines")
    stderr = acp.stderr()
    lines = stderr.splitlines()
    assert "Traceback" not in stderr, stderr[:2000]
    assert len(lines) < 100, f"{len(lines)} lines of stderr for {count} bad notifications"
    suppressed = sum(
        int(line.split("... ")[1].split()[0]) for line in lines if "suppressed" in line
    )
    logged = sum(1 for line in lines if "notification session/" in line)
    assert logged + suppressed == count, (logged, suppressed)
    assert acp.process.poll() is None


def test_requests_before_initialize_are_refused(acp: Acp, tmp_path: Path) -> None:
    request_id = acp.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    answer = acp.answer(request_id)
    assert answer.get("error", {}).get("code") == -32600, answer
    assert "initialize" in answer["error"]["message"]
    acp.initialize()
    acp.new_session(tmp_path)


@pytest.mark.parametrize(
    ("line", "answer_id"),
    [
        (b'{"jsonrpc":"1.0","id":5,"method":"initialize","params":{"protocolVersion":1}}', 5),
        (b'{"id":6,"method":"initialize","params":{"protocolVersion":1}}', 6),
        (b'{"jsonrpc":2.0,"id":"s","method":"initialize","params":{"protocolVersion":1}}', "s"),
        (b'{"jsonrpc":"1.0","method":"session/cancel","params":{"sessionId":"x"}}', None),
    ],
)
def test_a_jsonrpc_other_than_2_0_is_an_invalid_request(
    acp: Acp, line: bytes, answer_id: Any
) -> None:
    acp.send(line + b"\n")
    answer = acp.receive()
    assert answer["id"] == answer_id
    assert answer["error"]["code"] == -32600, answer
    assert "jsonrpc" in answer["error"]["message"]
    acp.initialize()
