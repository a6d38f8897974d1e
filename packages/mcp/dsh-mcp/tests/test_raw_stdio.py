"""``dsh mcp`` on stdio, raw: given what no well-behaved client sends, malformed frames
are dropped (logged), unknown methods and malformed requests answered with an error, a
line over ``--max-line-bytes`` dropped without being buffered, and serving goes on;
SIGTERM during a call ends the server (143) and the child's process tree with it."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"},
}


class RawMcp:
    """``python -m dsh.mcp`` with raw bytes in and parsed lines out."""

    def __init__(self, tmp_path: Path, preset: Path, *extra: str) -> None:
        self.stderr_path = tmp_path / "dsh-mcp.stderr"
        with self.stderr_path.open("ab") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dsh.mcp", "--preset", str(preset), *extra],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=tmp_path,
            )
        self.lines: queue.Queue[Any] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.next_id = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.put(json.loads(raw))
        self.lines.put(None)

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def request(self, method: str, params: Any = None) -> int:
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message).encode() + b"\n")
        return self.next_id

    def answer(self, request_id: int, timeout: float = 30.0) -> Any:
        """The response to ``request_id`` (anything before it is skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert message is not None, f"dsh mcp closed its stdout: {self.stderr()}"
            if "method" not in message and message.get("id") == request_id:
                return message

    def initialize(self) -> Any:
        answer = self.answer(self.request("initialize", INITIALIZE))
        assert "result" in answer, answer
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        return answer["result"]

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def rss_kib(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def close(self) -> int:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            return self.process.wait(timeout=15)
        finally:
            if self.process.returncode is None:
                self.process.kill()
                self.process.wait()
            self.reader.join(timeout=5)


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
