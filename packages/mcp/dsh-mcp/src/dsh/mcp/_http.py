"""``dsh mcp --http``: the server over streamable HTTP at ``http://HOST:PORT/mcp``.

The SDK's streamable HTTP app (sessions, SSE streams for progress) under uvicorn,
behind the same guards as ``dsh a2a`` (:mod:`dsh.http_guard`): the Host/Origin
allow-list (``403``; on loopback the DNS rebinding guard), the request body cap
(``413``), and, with ``--token-env``, a bearer token on every request (``401``). A
non-loopback bind without a token is refused. The SDK's own rebinding check is off:
the guard in front applies the one policy, ``--allow-host`` and ``--allow-origin``
included.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings

from dsh.http_guard import (
    BearerAuth,
    BodyLimit,
    HostGuard,
    QuietServer,
    host_policy,
    listen,
)

if TYPE_CHECKING:
    from dsh.mcp._catalog import Catalog
    from dsh.mcp._options import ServeOptions

__all__ = ["MCP_PATH", "serve_http"]

MCP_PATH = "/mcp"
"""Where the MCP endpoint is."""

_NAME = "dsh mcp"
_MAX_BODY = 4 * 1024 * 1024
_IDLE = 15.0


async def serve_http(
    server: Server[Any],
    options: ServeOptions,
    catalog: Catalog,
    tokens: dict[str, str],
    stoppers: list[Callable[[], None]],
    stopped: Callable[[], bool],
) -> None:
    """Serve until a stopper is called (``stoppers`` gets the one that stops it; a stop
    asked for before it was there, ``stopped()``, stops it at once)."""
    sock = listen(options.host, options.port)
    try:
        app = server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            host=options.host,
            max_request_body_size=_MAX_BODY,
        )
        asgi: Any = BearerAuth(app, tokens, realm=_NAME) if tokens else app
        asgi = BodyLimit(asgi, _MAX_BODY, _IDLE, server=_NAME)
        policy = host_policy(
            options.host, allow_hosts=options.allow_hosts, allow_origins=options.allow_origins
        )
        asgi = HostGuard(asgi, policy, server=_NAME)
        config = uvicorn.Config(
            asgi,
            log_config=None,
            access_log=False,
            lifespan="on",
            log_level=options.log_level,
            timeout_graceful_shutdown=2,
        )
        uv = QuietServer(config)

        def stop() -> None:
            uv.should_exit = True

        stoppers.append(stop)
        if stopped():
            stop()
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        auth = f"bearer token from ${next(iter(tokens))}" if tokens else "none (loopback)"
        print(
            f"dsh mcp: serving {len(catalog.tools)} tool(s) at http://{shown}:{port}{MCP_PATH}"
            f" (auth: {auth}; {policy.describe()})",
            file=sys.stderr,
            flush=True,
        )
        await uv.serve(sockets=[sock])
    finally:
        sock.close()
