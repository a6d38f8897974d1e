"""The shared rules in front of dsh's HTTP servers, on a bare ASGI app: the bind rules
and token reading, the Host/Origin allow-list, the bearer check, the body cap. (The
end-to-end treatment is in dsh-a2a's and dsh-mcp's tests, against real servers.)"""

from __future__ import annotations

from typing import Any

import pytest

from dsh.http_guard import (
    BearerAuth,
    BindError,
    BodyLimit,
    HostGuard,
    host_policy,
    is_loopback,
    read_tokens,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def status(app: Any, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], text


def test_a_non_loopback_bind_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_loopback("127.0.0.2")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert read_tokens([], "127.0.0.1") == {}
    with pytest.raises(BindError, match=r"refusing to bind 0\.0\.0\.0"):
        read_tokens([], "0.0.0.0")
    monkeypatch.setenv("GUARD_TOKEN", " s3cret ")
    assert read_tokens(["GUARD_TOKEN"], "0.0.0.0") == {"GUARD_TOKEN": "s3cret"}
    with pytest.raises(BindError, match="GUARD_TOKEN: the environment variable is not set"):
        read_tokens(["GUARD_TOKEN"], "0.0.0.0")  # removed once read


async def test_host_and_origin_are_checked_and_the_refusal_names_the_server() -> None:
    guard = HostGuard(_app, host_policy("127.0.0.1"), server="dsh test")
    assert (await status(guard, {"host": "127.0.0.1:9"}))[0] == 200
    assert (await status(guard, {"host": "localhost:9", "origin": "http://localhost:3"}))[0] == 200
    code, text = await status(guard, {"host": "attacker.example:9"})
    assert code == 403
    assert text.startswith(b"dsh test: Host")
    assert (await status(guard, {"host": "127.0.0.1", "origin": "http://evil.example"}))[0] == 403
    wider = HostGuard(
        _app,
        host_policy("127.0.0.1", allow_hosts=["box.lan"], allow_origins=["https://app.example"]),
        server="dsh test",
    )
    assert (await status(wider, {"host": "box.lan", "origin": "https://app.example"}))[0] == 200


async def test_the_bearer_token_is_required() -> None:
    auth = BearerAuth(_app, {"T": "s3cret"}, realm="dsh test")
    assert (await status(auth, {"authorization": "Bearer s3cret"}))[0] == 200
    assert (await status(auth, {"authorization": "bearer s3cret"}))[0] == 200
    assert (await status(auth, {"authorization": "Bearer other"}))[0] == 401
    assert (await status(auth, {}))[0] == 401


async def test_a_body_over_the_cap_is_413() -> None:
    limit = BodyLimit(_app, 10, 5.0, server="dsh test")
    assert (await status(limit, {"content-length": "5"}, b"12345"))[0] == 200
    code, text = await status(limit, {"content-length": "11"}, b"x" * 11)
    assert code == 413
    assert text.startswith(b"dsh test:")
