"""What one line is, per JSON-RPC 2.0: request, notification, response, or an error
with the reply that answers it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from dsh.jsonrpc._framing import OversizedLine, excerpt, scrub_surrogates

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "Frame",
    "FrameKind",
    "classify",
    "classify_message",
    "error_response",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
"""The request was cancelled (``$/cancel_request``); ACP's and LSP's code."""

FrameKind = Literal["request", "notification", "response", "error"]


@dataclass(frozen=True, slots=True)
class Frame:
    """One classified line: ``kind`` and the ``message``; for ``error`` the ``reply``
    that answers it (a JSON-RPC error response with id null or the id; None for a
    malformed *response*, which nobody answers) and the ``reason`` in words."""

    kind: FrameKind
    message: dict[str, Any] | None = None
    reply: dict[str, Any] | None = None
    reason: str = ""


def error_response(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def classify(line: bytes | OversizedLine, *, require_version: bool = False) -> Frame | None:
    """What one line is (None for a blank line, which is skipped).

    With ``require_version`` a message whose ``jsonrpc`` member is not exactly
    ``"2.0"`` is an error too (-32600, answered with the id of a request, else null):
    what a server owes its client. Without it (the default) the member is not
    looked at, so a peer that leaves it out (``codex app-server``) is understood.
    """
    if isinstance(line, OversizedLine):
        return _error(None, INVALID_REQUEST, f"message too large ({line.size} bytes on one line)")
    stripped = line.strip()
    if not stripped:
        return None
    try:
        message = json.loads(stripped)
    except (ValueError, RecursionError):
        return _error(None, PARSE_ERROR, f"parse error: {excerpt(stripped)}")
    if isinstance(message, dict) and _MAY_HOLD_SURROGATE.search(stripped):
        # content that cannot be encoded as UTF-8 must not go any further; the id
        # stays exact (a response echoes it)
        scrubbed = scrub_surrogates(message)
        if "id" in message:
            scrubbed["id"] = message["id"]
        message = scrubbed
    return classify_message(message, require_version=require_version)


def classify_message(message: Any, *, require_version: bool = False) -> Frame:
    """What one decoded JSON value is (see :func:`classify`)."""
    if isinstance(message, list):
        return _error(None, INVALID_REQUEST, "batch requests are not supported")
    if not isinstance(message, dict):
        shown = excerpt(json.dumps(message, ensure_ascii=True, default=repr))
        return _error(None, INVALID_REQUEST, f"a message must be a JSON object, got {shown}")
    has_id = "id" in message
    request_id = message.get("id")
    if has_id and not _valid_id(request_id):
        return _error(None, INVALID_REQUEST, "id must be a string or an integer")
    if require_version and message.get("jsonrpc") != "2.0":
        version = excerpt(json.dumps(message.get("jsonrpc"), ensure_ascii=True))
        return _invalid(
            message,
            has_id and "method" in message,
            f'jsonrpc must be "2.0", got {version if "jsonrpc" in message else "nothing"}',
        )
    if "method" in message:
        method = message["method"]
        if not isinstance(method, str) or not method:
            return _invalid(message, has_id, "method must be a non-empty string")
        params = message.get("params")
        if params is not None and not isinstance(params, dict | list):
            return _invalid(message, has_id, "params must be an object or an array")
        return Frame("request" if has_id else "notification", message)
    if has_id and ("result" in message) != ("error" in message):
        if "error" in message and not _error_object(message["error"]):
            why = "a response whose error is not an object with an integer code and a message"
            return Frame("error", message, reply=None, reason=why)
        return Frame("response", message)
    return _invalid(message, has_id, "not a request, notification or response")


def _error(request_id: Any, code: int, why: str) -> Frame:
    return Frame("error", reply=error_response(request_id, code, why), reason=why)


def _invalid(message: dict[str, Any], has_id: bool, why: str) -> Frame:
    request_id = message.get("id") if has_id else None
    reply = error_response(request_id, INVALID_REQUEST, f"invalid request: {why}")
    return Frame("error", message, reply=reply, reason=why)


def _valid_id(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int) and not isinstance(value, bool))
    )


def _error_object(error: Any) -> bool:
    return (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and not isinstance(error.get("code"), bool)
        and isinstance(error.get("message"), str)
    )


# what can decode to a lone surrogate: a \uD800-\uDFFF escape, or raw CESU-8 bytes
# (json.loads decodes bytes with "surrogatepass")
_MAY_HOLD_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
