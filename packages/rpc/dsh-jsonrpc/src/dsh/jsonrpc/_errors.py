"""The peer's errors: its own small tree (dsh-jsonrpc depends on nothing), which the
packages using it translate into their own errors at the one place they call it."""

from __future__ import annotations

from typing import Any

__all__ = ["JsonRpcError", "PeerClosed", "RemoteError"]


class JsonRpcError(Exception):
    """Base of the errors :class:`~dsh.jsonrpc.Peer` raises."""


class RemoteError(JsonRpcError):
    """A JSON-RPC error object: the other side answered a request with it (``method``
    names the request), or a request handler raises it to answer with it."""

    def __init__(self, code: int, message: str, data: Any = None, *, method: str = "") -> None:
        super().__init__(f"{method}: {message} (code {code})" if method else message)
        self.code = code
        self.message = message
        self.data = data
        self.method = method


class PeerClosed(JsonRpcError):
    """The connection ended (``reason``) before ``method`` was answered, or the request
    could not be written."""

    def __init__(self, reason: str, method: str = "") -> None:
        super().__init__(f"{reason}; {method} got no answer" if method else reason)
        self.reason = reason
        self.method = method
