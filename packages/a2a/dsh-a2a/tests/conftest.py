"""Fixtures: a real ``dsh a2a`` process on 127.0.0.1 (port 0), a prompt-keyed preset, and an
httpx transport that records every payload the SDK's client receives."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

KEYED_PRESET = """
[[plugin]]
name = "dsh-testing-keyed-model"

[agent.model]
adapter = "keyed"
[[agent.model.options.rules]]
contains = "hang"
replies = [{ hang = true }]
[[agent.model.options.rules]]
contains = "fail"
replies = [{ error = "the scripted model fails on purpose" }]
[[agent.model.options.default]]
text = "Done: {prompt}"
chunks = 3
"""

READY = re.compile(r"dsh a2a: serving \"[^\"]*\" at (\S+) ")
START_BOUND = 90.0


@dataclass
class Server:
    """A running ``dsh a2a`` process: its URL, its stderr file."""

    process: subprocess.Popen[bytes]
    url: str
    stderr_path: Path
    returncode: int | None = field(default=None)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, bound: float = 20.0) -> int:
        """Signal the server and wait for it (SIGKILL past ``bound``); its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(bound)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.returncode = self.process.returncode
        return self.returncode


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
    stderr_path = tmp / f"{name}.stderr"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
            env={**os.environ, **(env or {})},
            cwd=tmp,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_BOUND
    while time.monotonic() < deadline:
        match = READY.search(stderr_path.read_text(errors="replace"))
        if match:
            return Server(process, match.group(1), stderr_path)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    server = Server(process, "", stderr_path)
    server.stop(signal.SIGKILL)
    raise AssertionError(f"dsh a2a did not start:\n{server.stderr}")


@pytest.fixture
def kit() -> Any:
    """This module's helpers (test modules cannot import conftest under importlib mode)."""
    return sys.modules[__name__]


@pytest.fixture
def keyed_preset(tmp_path: Path) -> Path:
    """A preset whose model says ``Done: <prompt>`` in three chunks; "hang" hangs until
    cancelled, "fail" fails."""
    path = tmp_path / "agent.toml"
    path.write_text(KEYED_PRESET, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``dsh a2a`` (through ``dsh``'s ``a2a`` subcommand) serving the keyed preset; one per
    test module."""
    tmp = tmp_path_factory.mktemp("dsh-a2a")
    preset = tmp / "agent.toml"
    preset.write_text(KEYED_PRESET, encoding="utf-8")
    running = start_server(tmp, preset, via_cli=True)
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
            check("AgentCard", AgentCard, json.loads(exchange.body))
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
