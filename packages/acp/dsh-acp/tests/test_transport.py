""":func:`dsh.acp.serve` over real pipes, as ``dsh acp`` serves stdio: ``$/cancel_request``
(``requestId``), requests before ``initialize``, a wrong ``jsonrpc``, lone surrogates,
failing notifications, and a client that stops reading."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from acp.schema import PromptResponse

from dsh.acp import PromptBlock, serve
from dsh.testing.mock_acp_agent import AcpTestAgent

pytestmark = pytest.mark.timeout(60)


class SlowAgent(AcpTestAgent):
    """``session/prompt`` streams an update every 20 ms until cancelled (``session/cancel``
    or ``$/cancel_request`` through :meth:`cancel_request`), in any session, opened or
    not; ``_slow`` never answers."""

    def __init__(self, *, graceful: bool = True) -> None:
        super().__init__()
        self.graceful = graceful
        self.steps = 0
        self.cancelled: set[str] = set()
        self.slow_cancelled = asyncio.Event()
        self.texts: list[str] = []

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        self.texts += [getattr(block, "text", "") for block in prompt]
        while session_id not in self.cancelled:
            self.steps += 1
            await self.say(session_id, "step")
            await asyncio.sleep(0.02)
        return PromptResponse(stop_reason="cancelled")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.add(session_id)

    def cancel_request(self, method: str, params: Any) -> bool:
        if self.graceful and method == "session/prompt":
            self.cancelled.add(params["sessionId"])
            return True
        return False

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.slow_cancelled.set()
            raise
        return {}


class Client:
    """The client end: two real pipes, raw lines."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.write_fd = write_fd
        self.read_fd: int | None = read_fd
        self.buffer = b""

    def send(self, data: bytes | dict[str, Any]) -> None:
        if isinstance(data, dict):
            data = json.dumps(data).encode()
        os.write(self.write_fd, data + b"\n")

    async def receive(self, timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            assert self.read_fd is not None
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                assert time.monotonic() < deadline, "no answer"
                await asyncio.sleep(0.01)
                continue
            assert chunk, "the server closed its output"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    async def answer(self, request_id: Any, timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            message = await self.receive(max(deadline - time.monotonic(), 0.01))
            if "method" not in message and message.get("id") == request_id:
                return message

    async def initialize(self) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": "init",
                "method": "initialize",
                "params": {"protocolVersion": 1},
            }
        )
        answer = await self.answer("init")
        assert "result" in answer, answer


@asynccontextmanager
async def served(
    agent: SlowAgent, **options: Any
) -> AsyncIterator[tuple[Client, asyncio.Task[None]]]:
    """``serve(agent)`` on a pipe pair, as ``dsh acp`` serves stdio."""
    loop = asyncio.get_running_loop()
    to_server_r, to_server_w = os.pipe()
    to_client_r, to_client_w = os.pipe()
    os.set_blocking(to_client_r, False)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(to_server_r, "rb", buffering=0)
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(to_client_w, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    options.setdefault("on_cancel_request", agent.cancel_request)
    task = asyncio.create_task(serve(agent, reader, writer, **options))
    client = Client(to_server_w, to_client_r)
    try:
        yield client, task
    finally:
        os.close(to_server_w)
        try:
            await asyncio.wait_for(task, 10)
        finally:
            writer.close()
            if client.read_fd is not None:
                os.close(client.read_fd)


def run(test: Callable[[], Any]) -> None:
    asyncio.run(test())


def test_cancel_request_with_request_id_answers_request_cancelled() -> None:
    async def go() -> None:
        agent = SlowAgent()
        async with served(agent) as (client, _task):
            await client.initialize()
            client.send({"jsonrpc": "2.0", "id": 7, "method": "_slow", "params": {}})
            await asyncio.sleep(0.2)
            client.send(
                {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 7}}
            )
            answer = await client.answer(7)
            assert answer["error"]["code"] == -32800, answer
            assert answer["error"]["data"] == {"requestId": 7, "method": "_slow"}
            assert agent.slow_cancelled.is_set()
            # a cancel for a request not yet running, then the request: answered at once
            client.send(
                {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 8}}
            )
            client.send(
                {
                    "jsonrpc": "2.0",
                    "id": "n",
                    "method": "session/new",
                    "params": {"cwd": "/", "mcpServers": []},
                }
            )
            assert "result" in await client.answer("n")

    run(go)


def test_a_gracefully_cancelled_prompt_answers_by_itself() -> None:
    async def go() -> None:
        agent = SlowAgent()
        async with served(agent) as (client, _task):
            await client.initialize()
            params = {"sessionId": "s", "prompt": [{"type": "text", "text": "go"}]}
            client.send({"jsonrpc": "2.0", "id": "p", "method": "session/prompt", "params": params})
            await asyncio.sleep(0.2)
            client.send(
                {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "p"}}
            )
            answer = await client.answer("p")
            assert answer["result"]["stopReason"] == "cancelled", answer
        agent = SlowAgent(graceful=False)  # no graceful way: the handler is cancelled
        async with served(agent) as (client, _task):
            await client.initialize()
            client.send({"jsonrpc": "2.0", "id": "p", "method": "session/prompt", "params": params})
            await asyncio.sleep(0.2)
            client.send(
                {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "p"}}
            )
            answer = await client.answer("p")
            assert answer["error"]["code"] == -32800, answer

    run(go)


def test_requests_before_initialize_and_a_wrong_jsonrpc_are_invalid() -> None:
    async def go() -> None:
        async with served(SlowAgent()) as (client, _task):
            new = {"cwd": "/", "mcpServers": []}
            client.send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": new})
            answer = await client.receive()
            assert answer["id"] == 1
            assert answer["error"]["code"] == -32600
            assert "not initialized" in answer["error"]["message"]
            client.send(
                {
                    "jsonrpc": "1.0",
                    "id": 2,
                    "method": "initialize",
                    "params": {"protocolVersion": 1},
                }
            )
            answer = await client.receive()
            assert (answer["id"], answer["error"]["code"]) == (2, -32600)
            await client.initialize()
            client.send({"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": new})
            assert "result" in await client.answer(3)

    run(go)


def test_lone_surrogates_are_escaped_out_and_replaced_in() -> None:
    async def go() -> None:
        agent = SlowAgent()
        async with served(agent) as (client, _task):
            client.send(
                b'{"jsonrpc":"2.0","id":"\\ud800","method":"initialize","params":{"protocolVersion":1}}'
            )
            answer = await client.receive()
            assert answer["id"] == "\ud800"
            assert "result" in answer
            client.send(
                b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":'
                b'{"sessionId":"s","prompt":[{"type":"text","text":"hi \\ud83d"}]}}'
            )
            await asyncio.sleep(0.1)
            client.send(
                {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}}
            )
            await client.answer(1)
            assert agent.texts == ["hi \ufffd"]

    run(go)


def test_failing_notifications_log_one_line_each_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def go() -> None:
        async with served(SlowAgent()) as (client, _task):
            await client.initialize()
            for _ in range(500):
                client.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {}})
            await client.initialize()
            await asyncio.sleep(1.2)  # the second is over: the suppressed ones are counted

    with caplog.at_level(logging.WARNING, logger="dsh.acp"):
        run(go)
    lines = [r.getMessage() for r in caplog.records if r.name == "dsh.acp"]
    logged = [line for line in lines if line.startswith("notification session/cancel failed")]
    assert 1 <= len(logged) <= 15, lines  # 5 a second at most
    assert all("\n" not in line for line in lines)
    assert all(r.exc_info is None for r in caplog.records)
    suppressed = sum(int(line.split()[1]) for line in lines if "suppressed" in line)
    assert len(logged) + suppressed == 500


def test_a_client_that_stops_reading_ends_serving() -> None:
    async def go() -> None:
        agent = SlowAgent()
        lost: list[float] = []
        on_lost = lambda: lost.append(time.monotonic())  # noqa: E731
        async with served(agent, on_output_lost=on_lost) as (client, task):
            await client.initialize()
            params = {"sessionId": "s", "prompt": [{"type": "text", "text": "go"}]}
            client.send({"jsonrpc": "2.0", "id": "p", "method": "session/prompt", "params": params})
            while agent.steps < 3:
                await asyncio.sleep(0.01)
            assert client.read_fd is not None
            os.close(client.read_fd)  # stdin stays open
            client.read_fd = None
            closed = time.monotonic()
            await asyncio.wait_for(task, 5)  # serve() returned: the connection closed
            assert lost
            assert lost[0] - closed < 1.0
            steps = agent.steps
            await asyncio.sleep(0.3)
            assert agent.steps == steps  # the prompt was cancelled with the connection

    run(go)
