"""Bearer-token authentication: an ASGI middleware in front of every route.

A request without ``Authorization: Bearer <token>`` (or with another token) is
answered ``401`` before it reaches the routes. The comparison is constant-time; the
token is never logged. With several named tokens a request runs as the user its token
names (``scope["user"]``), so a server can keep each caller's work apart.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from typing import Any

from starlette.authentication import SimpleUser

__all__ = ["BearerAuth"]

Scope = dict[str, Any]
Receive = Any
Send = Any
ASGIApp = Any

_BODY = json.dumps({"error": "unauthorized", "detail": "a valid bearer token is required"}).encode()


class BearerAuth:
    """ASGI middleware: every HTTP request must carry one of the bearer ``tokens``
    (name → token); with several, the request runs as the user its token names.
    ``realm``: the ``WWW-Authenticate`` realm of a ``401`` (the server's name)."""

    def __init__(self, app: ASGIApp, tokens: Mapping[str, str], *, realm: str) -> None:
        if not tokens or not all(tokens.values()):
            raise ValueError("at least one bearer token is required, and none may be empty")
        if len(set(tokens.values())) != len(tokens):
            raise ValueError("two token names hold the same token; give each its own")
        self._app = app
        self._expected = [(name, b"bearer " + token.encode()) for name, token in tokens.items()]
        self._named = len(tokens) > 1
        self._challenge = f'Bearer realm="{realm}"'.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                given = value
                break
        # scheme case-insensitive (RFC 7235); the token itself compared in constant time,
        # against every token (no early exit)
        candidate = given[:7].lower() + given[7:]
        matched: str | None = None
        for name, expected in self._expected:
            if hmac.compare_digest(candidate, expected):
                matched = name
        if matched is not None:
            if self._named:
                scope = {**scope, "user": SimpleUser(matched)}
            await self._app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(_BODY)).encode()),
                    (b"www-authenticate", self._challenge),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _BODY})
