"""``dsh mcp``: serve the preset's subagent tools over MCP on stdio (or streamable HTTP
with ``--http``, see :mod:`dsh.mcp._http`).

The tools come from the preset (``--preset``, else ``./dsh.toml`` when trusted, else
the ``standard`` preset when dsh-cli is installed): see :mod:`dsh.mcp._catalog`.
Frames are read with a cap on their length (:mod:`dsh.mcp._wire`); the server ends
when stdin closes, or on SIGTERM / SIGINT / SIGHUP, after cancelling every running
call and disposing its delegation (the process trees included).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from dsh.core import DshError, Preset
from dsh.core.argtypes import UsageError, log_to_stderr, served_preset
from dsh.core.lifecycle import on_stop_signals
from dsh.mcp._options import ServeOptions

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from dsh.mcp._catalog import Catalog

__all__ = ["serve_command"]

_log = logging.getLogger("dsh.mcp")


def serve_command(options: ServeOptions) -> int:
    """Serve until stdin closes or a signal; the exit status (0, 2 on a configuration
    problem, 128 + the signal's number after SIGTERM / SIGINT / SIGHUP)."""
    log_to_stderr("dsh mcp", options.log_level)
    try:
        tokens: dict[str, str] = {}
        if options.http:
            from dsh.http_guard import BindError, read_tokens

            try:
                tokens = read_tokens(options.token_envs, options.host)
            except BindError as exc:
                raise UsageError(str(exc)) from None
        elif options.token_envs:
            raise UsageError("--token-env applies to --http only (stdio needs no token)")
        preset = served_preset(options.preset, trust=options.trust)
        return asyncio.run(_serve(options, preset, tokens))
    except UsageError as exc:
        print(f"dsh mcp: {exc}", file=sys.stderr)
        return 2


async def _serve(options: ServeOptions, preset: Preset, tokens: dict[str, str]) -> int:
    from dsh.core import Context
    from dsh.mcp._catalog import build_catalog
    from dsh.mcp._server import RunningCalls, build_server

    received: list[int] = []
    running = RunningCalls()
    stoppers: list[Callable[[], None]] = [running.cancel_all]

    def on_signal(number: int) -> None:
        received.append(number)
        for stop in stoppers:
            stop()

    with on_stop_signals(on_signal):
        try:
            async with Context.open(preset, sessions_dir=options.sessions_dir) as ctx:
                catalog = build_catalog(ctx, preset)
                name = options.name or f"dsh-{Path(preset.source).stem.strip('<>') or 'agent'}"
                server = build_server(ctx, catalog, name, running)
                with anyio.CancelScope() as scope:
                    if options.http:
                        from dsh.mcp._http import serve_http

                        await serve_http(
                            server, options, catalog, tokens, stoppers, lambda: bool(received)
                        )
                    else:
                        stoppers.append(scope.cancel)
                        if received:
                            scope.cancel()
                        await _serve_stdio(server, options, catalog)
        except DshError as exc:
            raise UsageError(str(exc)) from None
    return 128 + received[0] if received else 0


async def _serve_stdio(server: Server[Any], options: ServeOptions, catalog: Catalog) -> None:
    from mcp.server.stdio import stdio_server

    from dsh.mcp._wire import BoundedLines, claim_stdin

    wire = claim_stdin()
    try:
        print(
            f"dsh mcp: serving {len(catalog.tools)} tool(s) on stdio",
            file=sys.stderr,
            flush=True,
        )
        lines = BoundedLines(wire, options.max_line_bytes)
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        with contextlib.suppress(OSError):
            os.close(wire)
