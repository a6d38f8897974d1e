"""Hardening in front of the routes, against a real ``dsh a2a`` process with raw HTTP:
the Host/Origin allow-list (a DNS-rebinding request that would run a shell command is
refused and runs nothing), the request body cap (Content-Length and chunked), and the
header, idle and body timeouts."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import ListTasksRequest, TaskState

from dsh.testing.processes import run_cli

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def sdk_send(url: str, text: str, kit: Any) -> TaskState:
    """Send ``text`` with the SDK's client; the task's final state."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None)) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
        state: TaskState = await kit.final_state(client, text)
        return state


async def task_count(url: str) -> int:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
        return len((await client.list_tasks(ListTasksRequest())).tasks)


async def test_foreign_host_or_origin_is_refused_and_runs_nothing(tmp_path: Path, kit: Any) -> None:
    marker = tmp_path / "the-script-ran"
    preset = kit.command_tool_preset(tmp_path, f"touch {marker}")
    sessions = tmp_path / "sessions"
    server = kit.start_server(
        tmp_path,
        preset,
        "--sessions-dir",
        str(sessions),
        "--allow-host",
        "agents.internal",
        "--allow-origin",
        "https://app.example",
    )
    try:
        port = kit.address(server)[1]
        rebinding = f"rebind.attacker.example:{port}"
        headers = {"A2A-Version": "1.0"}
        refused = [
            {"Host": rebinding},  # DNS rebinding: the attacker's name now resolves to us
            {"Host": rebinding, "Origin": f"http://{rebinding}"},
            {"Host": f"127.0.0.1:{port}", "Origin": f"http://{rebinding}"},
            {"Host": f"localhost:{port}", "Origin": "null"},
            {"Host": f"localhost:{port}", "Origin": "https://other.example"},
            {"Host": f"localhost:{port}", "Origin": "file://"},
            {"Host": "127.0.0.1.attacker.example"},
            {"Host": "localhost.attacker.example:80"},
        ]
        async with httpx.AsyncClient(timeout=30) as http:
            for extra in refused:
                response = await http.post(
                    server.url,
                    json=kit.send_request("run the script"),
                    headers={**headers, **extra},
                )
                assert response.status_code == 403, (extra, response.text)
                assert response.headers["content-type"].startswith("text/plain")
                assert "--allow-host" in response.text or "--allow-origin" in response.text
                card = await http.get(server.url + ".well-known/agent-card.json", headers=extra)
                assert card.status_code == 403, (extra, card.text)
            # nothing ran, no agent started, no task exists
            await anyio.sleep(1.0)
            assert not marker.exists()
            assert not sessions.exists() or not any(sessions.iterdir())
            assert await task_count(server.url) == 0

            allowed = [
                {"Host": f"localhost:{port}"},
                {"Host": f"[::1]:{port}"},
                {"Host": "127.0.0.1"},
                {"Host": f"127.0.0.2:{port}"},
                {"Host": f"LOCALHOST:{port}"},
                {"Host": f"agents.internal:{port}"},  # --allow-host
                {"Host": f"localhost:{port}", "Origin": "http://localhost:3000"},
                {"Host": f"localhost:{port}", "Origin": f"http://127.0.0.1:{port}"},
                {"Host": f"localhost:{port}", "Origin": "https://app.example"},  # --allow-origin
                {"Host": f"localhost:{port}", "Origin": "https://agents.internal"},
            ]
            for extra in allowed:
                card = await http.get(server.url + ".well-known/agent-card.json", headers=extra)
                assert card.status_code == 200, (extra, card.text)
        # the same request from a proper client does run the script (so the test can see it)
        assert (
            await sdk_send(server.url, "please run the script", kit)
            == TaskState.TASK_STATE_COMPLETED
        )
        assert marker.exists()
    finally:
        assert server.stop() == 143
    assert "Traceback" not in server.stderr, server.stderr


def send_in_background(sock: socket.socket, chunks: list[bytes]) -> threading.Thread:
    """Send ``chunks`` on ``sock`` from a thread (stops quietly when the server closes)."""

    def run() -> None:
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except OSError:
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_request_bodies_over_the_cap_get_413(
    tmp_path: Path, keyed_preset: Path, kit: Any
) -> None:
    server = kit.start_server(tmp_path, keyed_preset)
    try:
        port = kit.address(server)[1]
        # a 5 MiB body (over the 4 MiB default) from an ordinary client
        async with httpx.AsyncClient(timeout=30) as http:
            big = (
                b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "pad": "'
                + b"x" * (5 * 1024 * 1024)
                + b'"}'
            )
            response = await http.post(
                server.url,
                content=big,
                headers={"content-type": "application/json", "A2A-Version": "1.0"},
            )
            assert response.status_code == 413, response.text[:300]
            assert "--max-body-bytes" in response.text

        # a 100 MB Content-Length: refused from the headers, before any of the body is read
        before = kit.rss_kib(server.process.pid)
        sock = kit.connect(server)
        with sock:
            sock.sendall(
                b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % (port, 100 * 1024 * 1024)
            )
            response = kit.read_response(sock)
            assert kit.status_of(response) == 413, response[:300]
        sock = kit.connect(server)
        with sock:  # and when the client does push the 100 MB, the server does not keep it
            sock.sendall(
                b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % (port, 100 * 1024 * 1024)
            )
            sender = send_in_background(sock, [b"x" * (1024 * 1024)] * 100)
            response = kit.read_response(sock)
            assert kit.status_of(response) == 413, response[:300]
            # the rest is read and thrown away, up to 16 MiB; then the server hangs up
            sender.join(30)
            assert not sender.is_alive()
        grown = kit.rss_kib(server.process.pid) - before
        assert grown < 30 * 1024, f"the server grew by {grown} KiB"

        # a chunked body (no Content-Length) streaming past the cap
        sock = kit.connect(server)
        with sock:
            sock.sendall(
                b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" % port
            )
            mib = b"x" * (1024 * 1024)
            chunk = b"%x\r\n%s\r\n" % (len(mib), mib)
            sender = send_in_background(sock, [chunk] * 6 + [b"0\r\n\r\n"])
            response = kit.read_response(sock)
            assert kit.status_of(response) == 413, response[:300]
            assert b"--max-body-bytes" in response
            sender.join(30)
        grown = kit.rss_kib(server.process.pid) - before
        assert grown < 30 * 1024, f"the server grew by {grown} KiB"

        # none of that made a task, and the server still works
        assert await task_count(server.url) == 0
        assert await sdk_send(server.url, "say hi", kit) == TaskState.TASK_STATE_COMPLETED
    finally:
        assert server.stop() == 143
    assert "Traceback" not in server.stderr, server.stderr


async def test_silent_slow_and_idle_connections_are_closed(
    tmp_path: Path, keyed_preset: Path, kit: Any
) -> None:
    bound = 15.0  # the timeouts are 1 s; generous for a loaded machine
    server = kit.start_server(
        tmp_path, keyed_preset, "--header-timeout", "1", "--idle-timeout", "1"
    )
    try:
        port = kit.address(server)[1]
        # connects and sends nothing
        with kit.connect(server) as sock:
            received, elapsed = kit.read_until_closed(sock, bound)
            assert received == b""
            assert elapsed >= 0.5, elapsed

        # half a request line, then nothing
        with kit.connect(server) as sock:
            sock.sendall(b"POST / HTT")
            received, elapsed = kit.read_until_closed(sock, bound)
            assert kit.status_of(received) == 408, received

        # slowloris: the headers a byte at a time, never finished; the timer is not reset
        with kit.connect(server) as sock:
            request = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
            stop = threading.Event()

            def trickle() -> None:
                for byte in request + b"a" * 1000:
                    if stop.wait(0.1):
                        return
                    try:
                        sock.send(bytes([byte]))
                    except OSError:
                        return

            thread = threading.Thread(target=trickle, daemon=True)
            thread.start()
            try:
                received, elapsed = kit.read_until_closed(sock, bound)
            finally:
                stop.set()
                thread.join(10)
            assert kit.status_of(received) == 408, received

        # a kept-alive connection idle after its response
        with kit.connect(server) as sock:
            sock.sendall(
                b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port
            )
            received, elapsed = kit.read_until_closed(sock, bound)
            assert kit.status_of(received) == 200, received[:300]
            assert b'"name"' in received

        # a request body that stops arriving
        with kit.connect(server) as sock:
            sock.sendall(
                b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"jsonrpc"' % port
            )
            received, elapsed = kit.read_until_closed(sock, bound)
            assert kit.status_of(received) == 408, received
            assert b"--idle-timeout" in received

        # a prompt client is unaffected
        assert await task_count(server.url) == 0
        assert await sdk_send(server.url, "say hi", kit) == TaskState.TASK_STATE_COMPLETED
    finally:
        assert server.stop() == 143
    assert "Traceback" not in server.stderr, server.stderr
    assert "ERROR" not in server.stderr, server.stderr


def test_the_options_are_validated(tmp_path: Path, keyed_preset: Path) -> None:
    import os

    cases = {
        ("--max-body-bytes", "0"): "must be at least 1, got 0",
        ("--header-timeout", "-1"): "must be positive, got -1",
        ("--max-tasks", "x"): "not an integer: 'x'",
    }
    for bad, said in cases.items():
        done = run_cli(
            "dsh.a2a",
            ["--preset", str(keyed_preset), "--port", "0", *bad],
            cwd=tmp_path,
            env=dict(os.environ),
            timeout=60,
        )
        assert done.returncode == 2, (bad, done.stderr)
        assert f"argument {bad[0]}: {said}" in done.stderr, done.stderr


def test_which_hosts_a_non_loopback_bind_allows() -> None:
    from dsh.a2a._serve import ServeOptions, host_policy

    behind = host_policy(
        ServeOptions(host="0.0.0.0", public_url="https://agents.example.com/reviewer/")
    )
    assert behind.allows_host("agents.example.com")
    assert behind.allows_host("localhost")  # a health check on the machine
    assert not behind.allows_host("rebind.attacker.example")
    assert behind.allows_origin("https://agents.example.com")
    assert not behind.allows_origin("https://attacker.example")

    direct = host_policy(ServeOptions(host="10.1.2.3", allow_hosts=["agents.internal"]))
    assert direct.allows_host("10.1.2.3")
    assert direct.allows_host("agents.internal")
    assert not direct.allows_host("10.1.2.4")

    wildcard = host_policy(ServeOptions(host="0.0.0.0"))  # only the token guards it
    assert wildcard.allows_host("whatever.example")
    assert wildcard.describe() == "host check: off"

    off = host_policy(ServeOptions(allow_hosts=["*"]))
    assert off.allows_host("rebind.attacker.example")
    assert off.allows_origin("null")
