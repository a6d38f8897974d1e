"""The TypeScript MCP SDK's client (``@modelcontextprotocol/sdk``, pinned by
tools/install-mcp-sdk.sh) against a real ``dsh mcp``, over stdio and streamable HTTP,
through ``mcp_ts_client.mjs`` on Node: the tool list, a call with progress, a cancel
that takes the child's process tree down within 2 s, a failing child.

The SDK is found through env ``DSH_MCP_SDK_DIR``, else
``<repo>/.tools/mcp-sdk/node_modules/@modelcontextprotocol/sdk``; under ``CI=true`` a
missing SDK or ``node`` fails the test, locally it is skipped with the install command.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
DEFAULT_SDK = REPO / ".tools" / "mcp-sdk" / "node_modules" / "@modelcontextprotocol" / "sdk"


def _sdk() -> tuple[str, Path]:
    in_ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
    node = shutil.which("node")
    sdk = Path(os.environ.get("DSH_MCP_SDK_DIR") or DEFAULT_SDK)
    problem = None
    if node is None:
        problem = "node not found on PATH; install Node.js >= 18, then tools/install-mcp-sdk.sh"
    elif not (sdk / "package.json").is_file():
        problem = f"no MCP TypeScript SDK at {sdk}: run tools/install-mcp-sdk.sh"
    if problem is not None:
        if in_ci:
            pytest.fail(problem)
        pytest.skip(problem)
    assert node is not None
    return node, sdk


class TsClient:
    """``mcp_ts_client.mjs`` running one scenario: its events, line by line."""

    def __init__(self, argv: list[str], cwd: Path, stderr: Path) -> None:
        with stderr.open("ab") as err:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=cwd
            )
        self.events: queue.Queue[Any] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def until(self, kind: str, timeout: float = 90.0) -> tuple[list[Any], Any]:
        """The events before the first of ``kind``, and that one."""
        before = []
        while True:
            event = self.events.get(timeout=timeout)
            assert event is not None, f"the client ended before a {kind!r} event: {before}"
            if event["event"] == kind:
                return before, event
            before.append(event)

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()


@contextmanager
def ts_client(
    tmp_path: Path, preset: Path, kit: Any, transport: str, scenario: str
) -> Iterator[TsClient]:
    node, sdk = _sdk()
    script = [node, str(HERE / "mcp_ts_client.mjs"), str(sdk), scenario]
    server = None
    if transport == "http":
        server = kit.start_http(tmp_path, preset)
        argv = [*script, "http", server.url]
    else:
        dsh = [sys.executable, "-m", "dsh.cli", "mcp", "--preset", str(preset)]
        argv = [*script, "stdio", "--", *dsh]
    client = TsClient(argv, tmp_path, tmp_path / "ts-client.stderr")
    try:
        yield client
        assert client.process.wait(timeout=60) == 0, (tmp_path / "ts-client.stderr").read_text()
    finally:
        if client.process.poll() is None:
            client.process.kill()
            client.process.wait()
        client.reader.join(timeout=5)
        if server is not None:
            server.stop()


def test_the_ts_client_lists_the_tools(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    with ts_client(tmp_path, preset, kit, transport, "list") as client:
        _, listed = client.until("tools")
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert set(tools) == {"delegate", "extract"}
    assert tools["extract"]["outputSchema"] == kit.ANSWER_SCHEMA


def test_the_ts_client_gets_progress_and_the_answer(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    with ts_client(tmp_path, preset, kit, transport, "call") as client:
        progress, result = client.until("result")
    messages = [event["message"] for event in progress]
    assert any(m.startswith("tool call: ") for m in messages), messages
    assert result["isError"] is False
    assert result["text"] == "child saw: echoed"
    assert result["meta"]["dsh"]["stopReason"] == "completed"


async def test_the_ts_clients_cancel_takes_the_childs_tree_down(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    with ts_client(tmp_path, preset, kit, transport, "cancel") as client:
        await kit.wait_for("the child's sleep to start", lambda: bool(kit.sleepers()))
        client.send("cancel")
        client.until("cancelled")
        took = await kit.wait_for("the sleep to be gone", lambda: not kit.sleepers(), bound=2.0)
        assert took < 2.0
        _, after = client.until("result")
    assert after["isError"] is False  # the server goes on serving


def test_the_ts_client_gets_a_failing_childs_diagnostic(
    tmp_path: Path, preset: Path, kit: Any, transport: str
) -> None:
    with ts_client(tmp_path, preset, kit, transport, "fail") as client:
        _, result = client.until("result")
    assert result["isError"] is True
    assert "refuses on purpose" in result["text"]
