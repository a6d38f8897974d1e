"""Bearer-token authentication for ``dsh a2a``: an ASGI middleware in front of every route.

A request without ``Authorization: Bearer <token>`` (or with another token) is
answered ``401`` before it reaches the A2A routes, so no task is created. The
comparison is constant-time; the token is never logged.

Several tokens, each with a name (``--token-env A --token-env B``: the variables'
names): a request is then made as the user its token names (``scope["user"]``), and
the task store keeps each user's tasks apart, so a task is visible only to the token
that created it. With a single token there is no user: every caller sees every task.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.routes import DefaultServerCallContextBuilder
from starlette.authentication import SimpleUser

__all__ = ["BearerAuth", "RedactingContextBuilder"]

Scope = dict[str, Any]
Receive = Any
Send = Any
ASGIApp = Any

_BODY = json.dumps({"error": "unauthorized", "detail": "a valid bearer token is required"}).encode()


class BearerAuth:
    """ASGI middleware: every HTTP request must carry one of the bearer ``tokens``
    (name → token); with several, the request runs as the user its token names."""

    def __init__(self, app: ASGIApp, tokens: Mapping[str, str]) -> None:
        if not tokens or not all(tokens.values()):
            raise ValueError("at least one bearer token is required, and none may be empty")
        if len(set(tokens.values())) != len(tokens):
            raise ValueError("two token names hold the same token; give each its own")
        self._app = app
        self._expected = [(name, b"bearer " + token.encode()) for name, token in tokens.items()]
        self._named = len(tokens) > 1

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
                    (b"www-authenticate", b'Bearer realm="dsh a2a"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _BODY})


class RedactingContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, without the ``Authorization`` header in its state (the
    SDK keeps the request headers there, and its debug logs print the context)."""

    def build(self, request: Any) -> ServerCallContext:
        context = super().build(request)
        headers = context.state.get("headers")
        if isinstance(headers, dict):
            context.state["headers"] = {
                key: value for key, value in headers.items() if key.lower() != "authorization"
            }
        return context
