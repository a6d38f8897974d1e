"""dsh.acp — the agent side of the Agent Client Protocol, for agents built on dsh.

``dsh acp`` (the ``acp`` entry point of ``dsh.commands``; ``python -m dsh.acp``) serves
a preset's agent over ACP on stdio: each ACP session is one dsh agent (docs/acp.md).

What ``dsh acp`` and the test kit's mock agent share:

* :class:`AcpAgentBase` — an ``acp.Agent`` whose optional methods answer "method
  not found" instead of the Protocol stub's ``null``;
* :func:`serve` / :func:`serve_stdio` and :class:`StrictAgentTransport` — strict
  NDJSON framing that answers every bad frame (-32700 parse error, -32600 for
  non-objects, batches, oversized lines, a ``jsonrpc`` other than ``"2.0"`` and
  requests before ``initialize``) and keeps serving, with ``$/cancel_request``
  (-32800), rate-limited logs of failed notifications, and an end when the client
  stops reading (the framing itself — line reader, frame check, surrogate
  scrubbing, error codes — is :mod:`dsh.jsonrpc`'s: import it from there);
* :func:`agent_message`, :func:`tool_call_start`, :func:`tool_call_progress` and
  :func:`text_block` — session updates built from the ``acp`` schema models.

Importing :mod:`dsh.acp` does not import ``acp`` (about a second); the names that
need it load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh.acp._agent_base import AcpAgentBase, McpServer, PromptBlock
    from dsh.acp._schema import agent_message, text_block, tool_call_progress, tool_call_start
    from dsh.acp._serve import serve, serve_stdio
    from dsh.acp._transport import StrictAgentTransport

__all__ = [
    "AcpAgentBase",
    "McpServer",
    "PromptBlock",
    "StrictAgentTransport",
    "agent_message",
    "serve",
    "serve_stdio",
    "text_block",
    "tool_call_progress",
    "tool_call_start",
]

_LAZY = {
    "AcpAgentBase": "dsh.acp._agent_base",
    "McpServer": "dsh.acp._agent_base",
    "PromptBlock": "dsh.acp._agent_base",
    "serve": "dsh.acp._serve",
    "serve_stdio": "dsh.acp._serve",
    "StrictAgentTransport": "dsh.acp._transport",
    "agent_message": "dsh.acp._schema",
    "text_block": "dsh.acp._schema",
    "tool_call_progress": "dsh.acp._schema",
    "tool_call_start": "dsh.acp._schema",
}


def __getattr__(name: str) -> object:
    """Load the names that import ``acp`` on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
