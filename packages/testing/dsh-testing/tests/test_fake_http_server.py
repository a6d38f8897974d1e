"""The shared fake-server base: lifecycle, request log, scripting, faults, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from dsh.testing.model_servers import (
    NO_FAULTS,
    Exchange,
    FakeServer,
    Hang,
    HTTPError,
    RecordedRequest,
    Reset,
    SSEEvent,
    StreamFaults,
    parse_sse,
)

pytestmark = pytest.mark.timeout(20)


@dataclass(frozen=True)
class Say:
    """A protocol item of the toy protocol below: stream these words."""

    words: list[str] = field(default_factory=list)
    faults: StreamFaults = NO_FAULTS


class WordServer(FakeServer):
    """A toy protocol built on the base, as the Responses/Anthropic fakes will be."""

    def __init__(self, *script: Any, default: Any = None) -> None:
        super().__init__(*script, default=default)
        self.route("POST", "/say", self.respond_scripted)
        self.route("GET", "/health", self._health)

    async def _health(self, exchange: Exchange) -> None:
        await exchange.send_json(200, {"ok": True})

    async def render(self, item: Any, exchange: Exchange) -> None:
        if not isinstance(item, Say):
            raise TypeError(f"cannot render {item!r}")
        events = [SSEEvent({"word": w}, event="word") for w in item.words]
        await exchange.stream(events, item.faults)


def request(
    srv: FakeServer,
    method: str = "POST",
    path: str = "/say",
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    try:
        payload = json.dumps(body if body is not None else {}) if method == "POST" else None
        conn.request(method, path, payload, {"content-type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def raw_request(srv: FakeServer, body: Any = None, path: str = "/say") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    payload = json.dumps(body or {}).encode()
    head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(payload)}\r\n\r\n"
    sock.sendall(head.encode() + payload)
    return sock


def words(body: bytes) -> list[str]:
    return [json.loads(e.data)["word"] for e in parse_sse(body) if e.event == "word"]


def test_sync_lifecycle_and_request_log() -> None:
    before = threading.active_count()
    with WordServer(Say(["a", "b"])) as srv:
        assert srv.base_url == f"http://127.0.0.1:{srv.port}"
        assert srv.port > 0
        status, headers, body = request(
            srv, path="/say?x=1&y=2", body={"n": 1}, headers={"X-Test": "yes"}
        )
        assert status == 200
        assert headers["content-type"] == "text/event-stream"
        assert words(body) == ["a", "b"]
        (recorded,) = srv.requests
        assert recorded.method == "POST"
        assert recorded.path == "/say?x=1&y=2"
        assert recorded.url_path == "/say"
        assert recorded.query == {"x": ["1"], "y": ["2"]}
        assert recorded.header("x-test") == "yes"
        assert recorded.headers["x-test"] == "yes"
        assert recorded.json == {"n": 1}
        assert (recorded.status, recorded.finished, recorded.client_disconnected) == (
            200,
            True,
            False,
        )
    assert threading.active_count() == before
    srv.close()  # idempotent


def test_start_twice_and_base_url_before_start() -> None:
    srv = WordServer()
    with pytest.raises(RuntimeError, match="not started"):
        _ = srv.base_url
    with srv, pytest.raises(RuntimeError, match="already started"):
        srv.start()


@pytest.mark.anyio
async def test_async_context_serves_while_the_test_loop_is_blocked() -> None:
    async with WordServer(Say(["x"]), Say(["y"])) as srv:
        # A blocking call from the test's own event loop: the server has its own thread.
        status, _, body = request(srv)
        assert (status, words(body)) == (200, ["x"])
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(
            b"POST /say HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
        )
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await writer.wait_closed()
        assert b"HTTP/1.1 200 OK" in raw
        assert b'"word":"y"' in raw


def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    with WordServer(Say(["one"]), Say(["two"])) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        try:
            for expected in ("one", "two"):
                conn.request("POST", "/say", "{}")
                response = conn.getresponse()
                assert words(response.read()) == [expected]
        finally:
            conn.close()
        assert len(srv.requests) == 2


def test_unknown_route_and_wrong_method() -> None:
    with WordServer() as srv:
        status, _, body = request(srv, "GET", "/nope")
        assert status == 404
        assert "no route for GET /nope" in json.loads(body)["error"]["message"]
        assert request(srv, "GET", "/say")[0] == 405
        assert request(srv, "GET", "/health")[2] == b'{"ok": true}'


def test_exhausted_script_says_so_and_default_repeats() -> None:
    with WordServer(Say(["only"])) as srv:
        assert request(srv)[0] == 200
        status, _, body = request(srv)
        assert status == 500
        assert "no scripted response left for POST /say (request #2)" in body.decode()
        srv.default = Say(["again"])
        assert words(request(srv)[2]) == ["again"]
        assert words(request(srv)[2]) == ["again"]
        srv.script(Say(["queued"]))
        assert srv.pending == 1
        assert words(request(srv)[2]) == ["queued"]


def test_callables_answer_as_a_function_of_the_request() -> None:
    async def later(req: RecordedRequest) -> Say:
        await asyncio.sleep(0)
        return Say([req.json["w"], "async"])

    with WordServer(lambda req: Say([req.json["w"]]), later) as srv:
        assert words(request(srv, body={"w": "echo"})[2]) == ["echo"]
        assert words(request(srv, body={"w": "hi"})[2]) == ["hi", "async"]


def test_http_error_with_rendered_or_given_body_and_headers() -> None:
    custom = HTTPError(503, body={"detail": "down"}, headers={"retry-after": "7"})
    with WordServer(HTTPError(429, "slow down"), custom) as srv:
        status, _, body = request(srv)
        assert status == 429
        assert json.loads(body) == {"error": {"message": "slow down", "code": 429}}
        status, headers, body = request(srv)
        assert (status, headers["retry-after"], json.loads(body)) == (503, "7", {"detail": "down"})


def test_handler_error_answers_500_and_is_recorded() -> None:
    with WordServer("not a Say") as srv:
        status, _, body = request(srv)
        assert status == 500
        assert "TypeError: cannot render 'not a Say'" in body.decode()
        assert isinstance(srv.errors[0], TypeError)


def test_hang_holds_the_request_until_the_server_closes() -> None:
    srv = WordServer(Hang()).start()
    sock = raw_request(srv)
    try:
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1024)
        srv.wait_for_requests(1)
        started = time.monotonic()
        srv.close()
        assert time.monotonic() - started < 2
        sock.settimeout(2)
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(1024) == b""  # closed, not answered
    finally:
        sock.close()
    (recorded,) = srv.requests
    assert (recorded.status, recorded.finished, recorded.client_disconnected) == (
        None,
        False,
        False,
    )


def test_reset_instead_of_answering() -> None:
    with WordServer(Reset()) as srv:
        sock = raw_request(srv)
        try:
            with pytest.raises(ConnectionResetError):
                sock.recv(1024)
        finally:
            sock.close()


def _read_into(sock: socket.socket, into: bytearray) -> None:
    while chunk := sock.recv(65536):
        into += chunk


def _read_all(sock: socket.socket) -> bytes:
    data = bytearray()
    _read_into(sock, data)
    return bytes(data)


def test_stream_reset_after_some_events() -> None:
    with WordServer(Say(["a", "b", "c"], StreamFaults(reset_after=2, delay=0.05))) as srv:
        sock = raw_request(srv)
        received = bytearray()
        try:
            with pytest.raises(ConnectionResetError):
                _read_into(sock, received)
        finally:
            sock.close()
        assert b'"word":"b"' in received
        assert b'"word":"c"' not in received


def test_stream_closed_cleanly_mid_body() -> None:
    with WordServer(Say(["a", "b"], StreamFaults(close_after=1))) as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        try:
            conn.request("POST", "/say", "{}")
            response = conn.getresponse()
            with pytest.raises(http.client.IncompleteRead) as caught:
                response.read()
            assert b'"word":"a"' in caught.value.partial
        finally:
            conn.close()


def test_stream_malformed_data_then_carries_on() -> None:
    faults = StreamFaults(malformed_after=1)
    with WordServer(Say(["a", "b"], faults)) as srv:
        body = request(srv)[2]
    events = parse_sse(body)
    assert [e.data for e in events][1] == "{this is not json"
    with pytest.raises(json.JSONDecodeError):
        events[1].json()
    assert words(body) == ["a", "b"]


def test_slow_stream_waits_between_events() -> None:
    with WordServer(Say(["a", "b", "c", "d"], StreamFaults(delay=0.1))) as srv:
        started = time.monotonic()
        body = request(srv)[2]
        assert time.monotonic() - started >= 0.38
        assert words(body) == ["a", "b", "c", "d"]


def test_hang_mid_stream_and_the_server_sees_the_client_leave() -> None:
    with WordServer(Say(["a", "b"], StreamFaults(hang_after=1))) as srv:
        sock = raw_request(srv)
        received = b""
        while b'"word":"a"' not in received:
            received += sock.recv(65536)
        assert not srv.requests[0].client_disconnected
        sock.close()
        srv.wait_until(lambda: srv.requests[0].client_disconnected, timeout=5)
        assert not srv.requests[0].finished
        assert srv.requests[0].status == 200


@pytest.mark.anyio
async def test_async_wait_until_does_not_block_the_loop() -> None:
    async with WordServer(Say(["a"], StreamFaults(hang_after=0))) as srv:
        _, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(b"POST /say HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        await srv.async_wait_until(lambda: len(srv.requests) == 1)
        writer.close()
        await writer.wait_closed()
        await srv.async_wait_until(lambda: srv.requests[0].client_disconnected)
        with pytest.raises(TimeoutError, match=r"within 0\.05 s"):
            await srv.async_wait_until(lambda: False, timeout=0.05)


def test_chunked_request_body_is_read() -> None:
    with WordServer(lambda req: Say([req.json["w"]])) as srv:
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        try:
            body = b'{"w": "chunky"}'
            sock.sendall(
                b"POST /say HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
                b"connection: close\r\n\r\n"
                + f"{5:x}\r\n".encode()
                + body[:5]
                + b"\r\n"
                + f"{len(body) - 5:x}\r\n".encode()
                + body[5:]
                + b"\r\n0\r\n\r\n"
            )
            assert b'"word":"chunky"' in _read_all(sock)
        finally:
            sock.close()


def test_garbage_request_gets_400() -> None:
    with WordServer() as srv:
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        try:
            sock.sendall(b"NONSENSE\r\n\r\n")
            assert _read_all(sock).startswith(b"HTTP/1.1 400 Bad Request")
        finally:
            sock.close()


def test_close_with_many_hanging_connections_leaves_no_thread() -> None:
    before = {t.ident for t in threading.enumerate()}
    srv = WordServer(default=Hang()).start()
    socks = [raw_request(srv) for _ in range(5)]
    try:
        srv.wait_for_requests(5)
        started = time.monotonic()
        srv.close()
        assert time.monotonic() - started < 2
    finally:
        for sock in socks:
            sock.close()
    assert {t.ident for t in threading.enumerate()} <= before


def test_parse_sse_follows_the_rules() -> None:
    payload = (
        ": comment\r\nevent: a\r\nid: 7\r\ndata: line1\r\ndata:line2\r\n\r\n"
        'data: {"k": 1}\n\n'
        "data: tail"
    )
    events = parse_sse(payload)
    assert events[0] == SSEEvent("line1\nline2", "a", "7")
    assert events[1].json() == {"k": 1}
    assert events[2].data == "tail"
    assert SSEEvent({"k": 1}, event="x").encode() == b'event: x\ndata: {"k":1}\n\n'
    assert SSEEvent("a\nb").encode() == b"data: a\ndata: b\n\n"
