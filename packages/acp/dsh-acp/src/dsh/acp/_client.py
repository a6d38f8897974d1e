"""The client proxy an agent served by :func:`dsh.acp.serve` is handed in ``on_connect``."""

from __future__ import annotations

from typing import Any

from acp import CLIENT_METHODS
from acp.core import Connection
from acp.schema import (
    PermissionOption,
    RequestPermissionRequest,
    RequestPermissionResponse,
    SessionNotification,
    ToolCallUpdate,
)
from acp.utils import notify_model, request_model

__all__ = ["ClientProxy"]


class ClientProxy:
    """The ACP client, as the agent sees it: ``session/update`` notifications and
    ``session/request_permission`` requests over the served connection (what
    ``acp.AgentSideConnection`` sends for them), and any other client request
    (:meth:`request`: ``dsh acp --workspace client``)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        """The ``acp`` connection the agent is served on."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Send ``update`` (a session update model) for ``session_id``; ``kwargs`` are
        its ``_meta``."""
        notification = SessionNotification(
            session_id=session_id, update=update, field_meta=kwargs or None
        )
        await notify_model(self.connection, CLIENT_METHODS["session_update"], notification)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        """Ask the client to choose one of ``options`` for ``tool_call``."""
        request = RequestPermissionRequest(
            options=options, session_id=session_id, tool_call=tool_call, field_meta=kwargs or None
        )
        method = CLIENT_METHODS["session_request_permission"]
        return await request_model(self.connection, method, request, RequestPermissionResponse)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send any client request (``fs/*``, ``terminal/*``) and return its result; an
        error answer raises ``acp.RequestError``."""
        return await self.connection.send_request(method, params)
