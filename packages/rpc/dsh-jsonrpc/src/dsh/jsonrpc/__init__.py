"""dsh.jsonrpc — a small JSON-RPC 2.0 peer over newline-delimited JSON (stdlib only).

* :class:`Peer` — one end of a connection: requests out (answers routed by id, so
  they run concurrently), requests and notifications in (to handlers), every pending
  request failed with :class:`PeerClosed` when the connection ends; bad lines end it
  or are skipped, as the caller decides (:class:`Invalid`). ``codex app-server``'s
  dialect (no ``jsonrpc`` member) is ``send_version=False``.
* :class:`LineReader` — lines with a cap on their length (:class:`OversizedLine`
  beyond it); :func:`classify` / :func:`classify_message` — what a line is per
  JSON-RPC 2.0 (:class:`Frame`), or which error answers it (:func:`error_response`);
  :func:`encode_message` / :func:`scrub_surrogates` — lone UTF-16 surrogates escaped
  on the way out, replaced (U+FFFD) on the way in; :func:`excerpt` for diagnostics.
* Errors: :class:`JsonRpcError`, :class:`RemoteError` (an error answer, either way),
  :class:`PeerClosed`.

Used by dsh's ACP client (``dsh-subagent-acp``), its codex client
(``dsh-subagent-codex``) and the agent side of ACP (``dsh-acp``).
"""

from dsh.jsonrpc._classify import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    Frame,
    classify,
    classify_message,
    error_response,
)
from dsh.jsonrpc._errors import JsonRpcError, PeerClosed, RemoteError
from dsh.jsonrpc._framing import (
    DEFAULT_MAX_LINE_BYTES,
    LineReader,
    OversizedLine,
    encode_message,
    excerpt,
    scrub_surrogates,
)
from dsh.jsonrpc._peer import Invalid, Peer

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "Frame",
    "Invalid",
    "JsonRpcError",
    "LineReader",
    "OversizedLine",
    "Peer",
    "PeerClosed",
    "RemoteError",
    "classify",
    "classify_message",
    "encode_message",
    "error_response",
    "excerpt",
    "scrub_surrogates",
]
