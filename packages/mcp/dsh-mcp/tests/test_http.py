"""``dsh mcp --http`` behind the same guards as ``dsh a2a`` (dsh-http-guard): a foreign
Host or Origin is refused (DNS rebinding), a bearer token is required when one is set
(and the MCP client gets through with it), a non-loopback bind needs a token; SIGTERM
during a call ends the server (143) and the child's process tree with it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
HEADERS = {"accept": "application/json, text/event-stream"}


async def test_a_foreign_host_or_origin_is_refused(tmp_path: Path, preset: Path, kit: Any) -> None:
    server = kit.start_http(tmp_path, preset, "--allow-origin", "https://app.example")
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            rebinding = await http.post(
                server.url, json=INITIALIZE, headers={**HEADERS, "host": "attacker.example"}
            )
            origin = await http.post(
                server.url, json=INITIALIZE, headers={**HEADERS, "origin": "http://evil.example"}
            )
            allowed = await http.post(
                server.url, json=INITIALIZE, headers={**HEADERS, "origin": "https://app.example"}
            )
        assert rebinding.status_code == 403
        assert "dsh mcp: Host" in rebinding.text
        assert origin.status_code == 403
        assert allowed.status_code == 200
    finally:
        server.stop()


async def test_a_token_is_required_when_set_and_the_client_passes_with_it(
    tmp_path: Path, preset: Path, kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_TEST_TOKEN", "s3cret-token")
    server = kit.start_http(tmp_path, preset, "--token-env", "MCP_TEST_TOKEN")
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            refused = await http.post(server.url, json=INITIALIZE, headers=HEADERS)
        assert refused.status_code == 401
        bearer = {"authorization": "Bearer s3cret-token"}
        async with (
            httpx2.AsyncClient(headers=bearer, timeout=60) as http,
            streamable_http_client(server.url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(60):
                await session.initialize()
                listed = await session.list_tools()
        assert {tool.name for tool in listed.tools} == {"delegate", "extract"}
        assert "s3cret-token" not in server.stderr
    finally:
        server.stop()


def test_a_non_loopback_bind_needs_a_token(tmp_path: Path, preset: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dsh.mcp", "--preset", str(preset), "--http", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "refusing to bind 0.0.0.0 without authentication" in done.stderr


async def test_sigterm_during_a_call_ends_the_server_and_the_childs_tree(
    tmp_path: Path, preset: Path, kit: Any
) -> None:
    server = kit.start_http(tmp_path, preset)
    try:
        async with (
            streamable_http_client(server.url) as (read, write),
            ClientSession(read, write) as session,
            anyio.create_task_group() as group,
        ):
            await session.initialize()

            async def call() -> None:
                await session.call_tool("delegate", {"description": "nap", "prompt": "SLEEP"})

            group.start_soon(call)
            await kit.wait_for("the child's sleep to start", lambda: bool(kit.sleepers()))
            server.process.send_signal(signal.SIGTERM)
            await kit.wait_for("the sleep to be gone", lambda: not kit.sleepers(), bound=2.0)
            assert await anyio.to_thread.run_sync(server.process.wait, 30) == 143
            group.cancel_scope.cancel()
    finally:
        server.stop()
