"""Fixtures: a real ``dsh a2a`` process on 127.0.0.1 (port 0), a prompt-keyed preset, an
httpx transport that records every payload the SDK's client receives, and raw-socket
helpers (requests the SDK's client would never send)."""

from __future__ import annotations

import json
import re
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from a2a.types import Message, Part, Role, SendMessageRequest

from dsh.testing.fixtures import (
    KEYED_PRESET,
    ServingProcess,
    keyed_preset_file,
    keyed_rule,
    plugin_rows,
    start_serving,
)

COMMAND_TOOL_PRESET = (
    KEYED_PRESET
    + plugin_rows(("dsh-testing-example", {"command_tool": "run"}))
    + keyed_rule(
        "run the script",
        {
            "text": "Running it.",
            "tool_calls": [{"name": "run", "arguments": {"argv": ["/bin/sh", "-c", "$SCRIPT"]}}],
        },
        {"text": "ran: {tool_results}"},
    )
)


def command_tool_preset(directory: Path, script: str) -> Path:
    """The keyed preset plus a ``run`` tool (dsh-testing-example's command tool, which
    inherits the server's environment); a prompt containing "run the script" makes the
    model call it with ``/bin/sh -c <script>``."""
    path = directory / "command-agent.toml"
    escaped = script.replace("\\", "\\\\").replace('"', '\\"')
    path.write_text(COMMAND_TOOL_PRESET.replace("$SCRIPT", escaped), encoding="utf-8")
    return path


READY = re.compile(r"dsh a2a: serving \"[^\"]*\" at (\S+) ")
START_BOUND = 90.0


Server = ServingProcess
"""A running ``dsh a2a`` process: its URL, its stderr file."""


def start_server(
    tmp: Path,
    preset: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    via_cli: bool = False,
    name: str = "server",
) -> Server:
    """Start ``dsh a2a`` (``python -m dsh.cli a2a`` with ``via_cli``, else ``python -m
    dsh.a2a``) on 127.0.0.1 with a free port; wait until it serves."""
    module = ["-m", "dsh.cli", "a2a"] if via_cli else ["-m", "dsh.a2a"]
    argv = [sys.executable, *module, "--preset", str(preset), "--port", "0", *extra]
    return start_serving(argv, READY, tmp / f"{name}.stderr", env=env, cwd=tmp, bound=START_BOUND)


def address(server: Server) -> tuple[str, int]:
    """The server's host and port."""
    parts = urlsplit(server.url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def connect(server: Server, timeout: float = 30.0) -> socket.socket:
    """A raw TCP connection to the server (``timeout`` on each receive)."""
    sock = socket.create_connection(address(server), timeout=10)
    sock.settimeout(timeout)
    return sock


def read_until_closed(sock: socket.socket, bound: float = 30.0) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and the seconds that
    took; fails if the connection is still open after ``bound`` seconds."""
    started = time.monotonic()
    received = b""
    while True:
        remaining = bound - (time.monotonic() - started)
        assert remaining > 0, f"the server kept the connection open; got {received[:200]!r}"
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        except TimeoutError:
            raise AssertionError(
                f"the server kept the connection open for {bound} s; got {received[:200]!r}"
            ) from None
        if not chunk:
            return received, time.monotonic() - started
        received += chunk


def read_response(sock: socket.socket, bound: float = 30.0) -> bytes:
    """One HTTP response with a ``content-length`` (head and body) from ``sock``."""
    sock.settimeout(bound)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection; got {received[:200]!r}"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection; got {received[:200]!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


def status_of(response: bytes) -> int:
    """The status code of a raw HTTP response."""
    line = response.split(b"\r\n", 1)[0]
    assert line.startswith(b"HTTP/1.1 "), response[:200]
    return int(line.split()[1])


def rss_kib(pid: int) -> int:
    """The resident set size of process ``pid`` in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def send_request(text: str) -> dict[str, Any]:
    """A raw JSON-RPC ``SendMessage`` request of a user message ``text``."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": uuid.uuid4().hex,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
        },
    }


def user_message(text: str, *, context_id: str | None = None, meta: Any = None) -> Message:
    """A user's message of ``text`` (SDK types), in ``context_id`` if given, with ``meta``
    in its metadata."""
    msg = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
    if context_id:
        msg.context_id = context_id
    if meta is not None:
        msg.metadata.update(meta)
    return msg


def artifact_text(task: Any) -> str:
    """The text of a task's artifacts."""
    return "".join(part.text for artifact in task.artifacts for part in artifact.parts)


async def final_state(client: Any, text: str) -> Any:
    """Send ``text`` with the SDK's ``client`` (streaming); the task's last state (within
    30 s)."""
    states = []
    with anyio.fail_after(30):
        request = SendMessageRequest(message=user_message(text))
        async for event in client.send_message(request):
            if event.HasField("status_update"):
                states.append(event.status_update.status.state)
    return states[-1]


@pytest.fixture
def kit() -> Any:
    """This module's helpers (test modules cannot import conftest under importlib mode)."""
    return sys.modules[__name__]


@pytest.fixture
def keyed_preset(tmp_path: Path) -> Path:
    """A preset whose model says ``Done: <prompt>`` in three chunks; "hang" hangs until
    cancelled, "fail" fails."""
    return keyed_preset_file(tmp_path / "agent.toml")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``dsh a2a`` (through ``dsh``'s ``a2a`` subcommand) serving the keyed preset; one per
    test module."""
    tmp = tmp_path_factory.mktemp("dsh-a2a")
    running = start_server(tmp, keyed_preset_file(tmp / "agent.toml"), via_cli=True)
    try:
        yield running
    finally:
        assert running.stop() == 143
    assert "Traceback" not in running.stderr, running.stderr


# -- recording what the SDK's client receives --------------------------------------------


@dataclass
class Exchange:
    """One HTTP exchange: the request (method, URL, JSON body) and the response body."""

    method: str
    url: str
    request: Any
    status: int
    content_type: str
    body: bytes = b""


class RecordingTransport(httpx.AsyncBaseTransport):
    """Passes requests on and keeps a copy of every response body (streams included)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.exchanges: list[Exchange] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = request.content
        exchange = Exchange(
            request.method,
            str(request.url),
            json.loads(body) if body else None,
            0,
            "",
        )
        response = await self.inner.handle_async_request(request)
        exchange.status = response.status_code
        exchange.content_type = response.headers.get("content-type", "")
        self.exchanges.append(exchange)
        inner_stream = response.stream

        class Tee(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                assert isinstance(inner_stream, httpx.AsyncByteStream)
                async for chunk in inner_stream:
                    exchange.body += chunk
                    yield chunk

            async def aclose(self) -> None:
                assert isinstance(inner_stream, httpx.AsyncByteStream)
                await inner_stream.aclose()

        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=Tee(),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def sse_data(body: bytes) -> list[str]:
    """The ``data`` payloads of a server-sent event stream."""
    events: list[str] = []
    chunks: list[str] = []
    for line in body.decode().splitlines():
        if not line:
            if chunks:
                events.append("\n".join(chunks))
            chunks = []
        elif line.startswith("data:"):
            chunks.append(line[5:].removeprefix(" "))
    if chunks:
        events.append("\n".join(chunks))
    return events


LEGACY_CARD_FIELDS = (
    "url",
    "preferredTransport",
    "protocolVersion",
    "additionalInterfaces",
    "security",
)
"""Top-level fields of the agent card that only A2A 0.3 clients read."""


def validate_exchanges(exchanges: Sequence[Exchange]) -> dict[str, int]:
    """Parse every recorded payload strictly (unknown fields are errors) into the SDK's
    types; returns how many payloads of each kind were checked."""
    from a2a.types import (
        AgentCard,
        ListTasksResponse,
        SendMessageResponse,
        StreamResponse,
        Task,
    )
    from google.protobuf.json_format import ParseDict

    result_types: dict[str, Any] = {
        "SendMessage": SendMessageResponse,
        "GetTask": Task,
        "CancelTask": Task,
        "ListTasks": ListTasksResponse,
    }
    counts: dict[str, int] = {}

    def check(kind: str, message_type: Any, data: Any) -> None:
        ParseDict(data, message_type(), ignore_unknown_fields=False)
        counts[kind] = counts.get(kind, 0) + 1

    for exchange in exchanges:
        assert exchange.status == 200, (exchange.url, exchange.status, exchange.body[:300])
        if exchange.method == "GET":
            card = json.loads(exchange.body)
            for legacy in LEGACY_CARD_FIELDS:  # the card's A2A 0.3 view (test_v03_client.py)
                card.pop(legacy, None)
            check("AgentCard", AgentCard, card)
            continue
        method = exchange.request["method"]
        if "text/event-stream" in exchange.content_type:
            for data in sse_data(exchange.body):
                envelope = json.loads(data)
                assert envelope.get("jsonrpc") == "2.0", envelope
                assert "error" not in envelope, envelope
                check(f"{method} event", StreamResponse, envelope["result"])
            continue
        envelope = json.loads(exchange.body)
        assert envelope.get("jsonrpc") == "2.0", envelope
        assert "error" not in envelope, envelope
        check(method, result_types[method], envelope["result"])
    return counts
