"""Serving an ACP agent over a pair of streams with :class:`StrictAgentTransport`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from acp.agent.router import build_agent_router
from acp.core import Connection

from dsh.acp._client import ClientProxy
from dsh.acp._otel import MessageContext, quiet_acp_root_spans
from dsh.acp._transport import CancelRequestHandler, StrictAgentTransport
from dsh.jsonrpc import DEFAULT_MAX_LINE_BYTES

__all__ = ["serve", "serve_stdio"]

_FLUSH_SECONDS = 2.0


async def serve(
    agent: Any,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    on_cancel_request: CancelRequestHandler | None = None,
    at_end_of_input: Callable[[], Awaitable[None]] | None = None,
    on_message: Callable[[dict[str, Any]], None] | None = None,
    on_output_lost: Callable[[], None] | None = None,
) -> None:
    """Serve ``agent`` (an ``acp.Agent``) until the client's input ends, or writing to
    the client fails.

    Every frame goes through :class:`StrictAgentTransport`; unstable methods
    (``session/close``...) are routed to the agent. ``$/cancel_request`` first asks
    ``on_cancel_request`` (True: it cancelled the request itself), else cancels the
    request's handler, which answers -32800. A failed write (the client stopped
    reading) calls ``on_output_lost`` at once (cancel the running turns) and ends
    the input. At end of input ``at_end_of_input()`` runs while the connection is
    still open (cancel the running turns, or let requests already received finish);
    then the answers of the requests that have finished are written and flushed
    (within 2 s), and the connection closes, cancelling whatever request is still
    running.
    ``on_message`` sees every well-formed incoming message first (raw JSON, before
    the ``acp`` models drop what they do not know).

    The ``acp`` library's ``acp.request`` spans (when ``opentelemetry`` is installed)
    continue the trace context a request carries in ``_meta`` and are never roots of
    traces of their own (see :mod:`dsh.acp._otel`).
    """
    quiet_acp_root_spans()
    trace_context = MessageContext()

    def seen(message: dict[str, Any]) -> None:
        trace_context.enter(message)  # copied into the task that handles the message
        if on_message is not None:
            on_message(message)

    transport = StrictAgentTransport(
        reader,
        writer,
        max_line_bytes=max_line_bytes,
        on_cancel_request=on_cancel_request,
        on_message=seen,
        on_output_lost=on_output_lost,
    )
    # what acp.AgentSideConnection does (the same router and connection), with the
    # router wrapped for $/cancel_request and for notifications that fail
    router = build_agent_router(agent, use_unstable_protocol=True)
    connection = Connection(transport.guard(router), transport, listening=False)
    on_connect = getattr(agent, "on_connect", None)
    if on_connect is not None:
        on_connect(ClientProxy(connection))
    try:
        await connection.main_loop()
        if at_end_of_input is not None:
            await at_end_of_input()
        # acp 1.0 writes each answer in a task of its own, which close() cancels
        await transport.flush(_FLUSH_SECONDS)
    finally:
        await connection.close()


async def serve_stdio(
    agent: Any,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    on_message: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """:func:`serve` on this process's stdin and stdout."""
    from acp.stdio import stdio_streams

    reader, writer = await stdio_streams()
    await serve(agent, reader, writer, max_line_bytes=max_line_bytes, on_message=on_message)
