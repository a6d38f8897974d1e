"""``dsh mcp`` on stdio, raw: given what no well-behaved client sends, malformed frames
are dropped (logged), unknown methods and malformed requests answered with an error, a
line over ``--max-line-bytes`` dropped without being buffered, and serving goes on;
SIGTERM during a call ends the server (143) and the child's process tree with it."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.testing.processes import JsonLinesProcess

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"},
}


class RawMcp(JsonLinesProcess):
    """``python -m dsh.mcp`` with raw bytes in and parsed lines out."""

    def __init__(self, tmp_path: Path, preset: Path, *extra: str) -> None:
        super().__init__(
            [sys.executable, "-m", "dsh.mcp", "--preset", str(preset), *extra],
            tmp_path,
            tmp_path / "dsh-mcp.stderr",
            name="dsh mcp",
        )

    def initialize(self) -> Any:
        answer = self.answer(self.request("initialize", INITIALIZE))
        assert "result" in answer, answer
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        return answer["result"]


@pytest.fixture
def raw(tmp_path: Path, preset: Path) -> Iterator[RawMcp]:
    server = RawMcp(tmp_path, preset)
    try:
        yield server
    finally:
        assert server.close() in (0, 128 + signal.SIGTERM)


BAD_FRAMES = [
    b"{not json",
    b"\xff\xfe garbage",
    b"[]",
    b"5",
    b'"x"',
    b"null",
    b'{"jsonrpc":"2.0","id":7}',
    b'{"jsonrpc":"2.0","id":{"a":1},"method":"initialize"}',
    b'{"jsonrpc":"2.0","id":8,"method":5}',
    b'{"jsonrpc":"1.0","id":9,"method":"ping"}',
]


def test_malformed_frames_are_dropped_and_serving_goes_on(raw: RawMcp) -> None:
    for frame in BAD_FRAMES:
        raw.send(frame + b"\n")
    assert raw.initialize()["serverInfo"]["name"] == "dsh-delegate"
    tools = raw.answer(raw.request("tools/list"))
    assert {tool["name"] for tool in tools["result"]["tools"]} == {"delegate", "extract"}
    assert raw.process.poll() is None


def test_unknown_methods_and_bad_params_are_answered_with_errors(raw: RawMcp) -> None:
    raw.initialize()
    unknown = raw.answer(raw.request("no/such/method", {}))
    assert unknown["error"]["code"] == -32601
    bad = raw.answer(raw.request("tools/call", {"name": 5}))
    assert bad["error"]["code"] == -32602
    call = raw.answer(raw.request("tools/call", {"name": "delegate", "arguments": {"x": 1}}))
    assert call["result"]["isError"] is True
    assert raw.answer(raw.request("ping"))["result"] == {}


def test_a_line_over_the_cap_is_dropped_and_memory_stays_bounded(
    tmp_path: Path, preset: Path
) -> None:
    server = RawMcp(tmp_path, preset, "--max-line-bytes", str(1024 * 1024))
    try:
        server.initialize()
        before = server.rss_kib()
        chunk = b"x" * (1024 * 1024)
        for _ in range(64):  # one 64 MiB line, no newline until the end
            server.send(chunk)
        server.send(b"\n")
        assert server.answer(server.request("ping"))["result"] == {}
        assert server.rss_kib() - before < 32 * 1024, "the runaway line was buffered"
        assert "dropped a frame of" in server.stderr()
    finally:
        assert server.close() == 0


async def test_sigterm_during_a_call_ends_the_server_and_the_childs_tree(
    raw: RawMcp, kit: Any
) -> None:
    raw.initialize()
    call = {"name": "delegate", "arguments": {"description": "nap", "prompt": "SLEEP"}}
    raw.request("tools/call", call)
    await kit.wait_for("the child's sleep to start", lambda: bool(kit.sleepers()))
    raw.process.send_signal(signal.SIGTERM)
    assert raw.process.wait(timeout=30) == 128 + signal.SIGTERM
    await kit.wait_for("the sleep to be gone", lambda: not kit.sleepers(), bound=2.0)
