"""Bearer-token authentication for ``dsh a2a``: :class:`dsh.http_guard.BearerAuth` in
front of every route, and the call context without the token.

A request without ``Authorization: Bearer <token>`` (or with another token) is
answered ``401`` before it reaches the A2A routes, so no task is created. The
comparison is constant-time; the token is never logged.

Several tokens, each with a name (``--token-env A --token-env B``: the variables'
names): a request is then made as the user its token names (``scope["user"]``), and
the task store keeps each user's tasks apart, so a task is visible only to the token
that created it. With a single token there is no user: every caller sees every task.
"""

from __future__ import annotations

from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.routes import DefaultServerCallContextBuilder

__all__ = ["RedactingContextBuilder"]


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
