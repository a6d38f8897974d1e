"""``dsh a2a``: serve a dsh agent over A2A (JSON-RPC over HTTP, with SSE streaming).

The agent comes from the preset (``--preset``, else ``./dsh.toml``, else the
``standard`` preset when dsh-cli is installed). The server is the SDK's request
handler and routes (agent card at ``/.well-known/agent-card.json``, JSON-RPC at
``/``) in a Starlette app under uvicorn, with :class:`~dsh.a2a.DshAgentExecutor`
running the tasks.

Binding: ``127.0.0.1`` by default. Any other address requires ``--token-env NAME``:
the server then reads the token from that environment variable (and removes it from
its own environment, so nothing it starts inherits it), and every request must carry
``Authorization: Bearer <token>`` (``401`` otherwise, before any task exists). The
token is never printed or logged.

Ending: SIGTERM (and SIGINT) cancel every running task (they end ``canceled``), stop
accepting connections, let open streams deliver their last update (``--grace``
seconds at most), dispose every delegation the agents started (their process trees
included) and exit with status 143 (130).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from dsh.core import Preset

__all__ = ["ServeOptions", "serve_command"]

_log = logging.getLogger("dsh.a2a")


@dataclass
class ServeOptions:
    """What ``dsh a2a`` was asked to do (its command-line options)."""

    preset: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str | None = None
    token_env: str | None = None
    task_store: str | None = None
    name: str | None = None
    description: str | None = None
    sessions_dir: str | None = None
    max_contexts: int = 256
    context_idle: float = 1800.0
    grace: float = 5.0
    log_level: str = "warning"


class UsageError(Exception):
    """A configuration problem: reported in one line, exit status 2."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(options: ServeOptions) -> str | None:
    """The bearer token (None: no auth). Refuses a non-loopback bind without one.
    The variable is removed from this process's environment once read."""
    if options.token_env is None:
        if not is_loopback(options.host):
            raise UsageError(
                f"refusing to bind {options.host} without authentication: pass --token-env NAME"
                " (the environment variable that holds the bearer token every request must"
                " carry), or bind 127.0.0.1"
            )
        return None
    token = os.environ.pop(options.token_env, None)
    if not token or not token.strip():
        raise UsageError(
            f"--token-env {options.token_env}: the environment variable is not set or empty"
        )
    return token.strip()


def serve_command(options: ServeOptions) -> int:
    """Run the server until a signal; the exit status (0, 2 on a configuration
    problem, 128 + the signal's number after SIGTERM / SIGINT)."""
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, options.log_level.upper(), logging.WARNING),
        format="dsh a2a: %(levelname)s %(name)s: %(message)s",
    )
    try:
        token = read_token(options)
        from dsh.core import PresetError, find_preset

        try:
            preset = find_preset(options.preset)
        except (PresetError, OSError) as exc:
            raise UsageError(str(exc)) from None
        if preset is None:
            raise UsageError("no preset: pass --preset FILE (or put a dsh.toml here)")
        if preset.agent.model is None:
            raise UsageError(
                f"no model is configured in {preset.source}; add an [agent.model] table to the"
                " preset"
            )
        return asyncio.run(_serve(options, preset, token))
    except UsageError as exc:
        print(f"dsh a2a: {exc}", file=sys.stderr)
        return 2


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on accepted
    # sockets whose proto says TCP; with Nagle on, every response after the first on a
    # kept-alive connection waits for the client's delayed ACK (about 40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc}") from None
    sock.set_inheritable(False)
    return sock


def _public_url(options: ServeOptions, port: int) -> str:
    if options.public_url:
        return options.public_url if options.public_url.endswith("/") else options.public_url + "/"
    host = options.host.strip("[]")
    if host in ("0.0.0.0", "::"):
        host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-a2a")
    except PackageNotFoundError:
        return "0"


async def _serve(options: ServeOptions, preset: Preset, token: str | None) -> int:
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import (
        create_agent_card_routes,
        create_jsonrpc_routes,
        create_rest_routes,
    )
    from starlette.applications import Starlette

    from dsh.a2a._auth import BearerAuth, RedactingContextBuilder
    from dsh.a2a._card import REST_PATH, build_agent_card
    from dsh.a2a._executor import DshAgentExecutor
    from dsh.a2a._store import TaskStoreError, open_task_store
    from dsh.core import Context

    sock = _bind(options.host, options.port)
    try:
        port = sock.getsockname()[1]
        url = _public_url(options, port)
        try:
            opened = await open_task_store(options.task_store)
        except TaskStoreError as exc:
            raise UsageError(str(exc)) from None
        received: list[int] = []
        try:
            async with Context.open(preset, sessions_dir=options.sessions_dir) as ctx:
                executor = DshAgentExecutor(
                    ctx,
                    max_contexts=options.max_contexts,
                    context_idle=options.context_idle,
                    heartbeat=2.0 if opened.shared else None,
                )
                name = options.name or f"dsh-{Path(preset.source).stem or 'agent'}"
                card = build_agent_card(
                    ctx,
                    url=url,
                    name=name,
                    description=options.description,
                    version=_version(),
                    bearer=token is not None,
                )
                handler = DefaultRequestHandler(
                    agent_executor=executor,
                    task_store=opened.store,
                    agent_card=card,
                    event_stream=opened.event_stream,
                )
                context_builder = RedactingContextBuilder()
                app = Starlette(
                    routes=[
                        *create_agent_card_routes(card),
                        *create_jsonrpc_routes(
                            handler, rpc_url="/", context_builder=context_builder
                        ),
                        *create_rest_routes(
                            handler, context_builder=context_builder, path_prefix=REST_PATH
                        ),
                    ]
                )
                asgi: Any = BearerAuth(app, token) if token is not None else app
                config = uvicorn.Config(
                    asgi,
                    log_config=None,
                    access_log=False,
                    lifespan="off",
                    log_level=options.log_level,
                    timeout_graceful_shutdown=max(int(options.grace), 1),
                )
                server = _Server(config)
                loop = asyncio.get_running_loop()

                def on_signal(number: int) -> None:
                    received.append(number)
                    executor.cancel_all("dsh a2a is shutting down")
                    server.should_exit = True

                for number in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(number, on_signal, number)
                auth = f"bearer token from ${options.token_env}" if token else "none (loopback)"
                print(
                    f'dsh a2a: serving "{name}" at {url} (agent card: {url}.well-known/'
                    f"agent-card.json; task store: {opened.description}; auth: {auth})",
                    file=sys.stderr,
                    flush=True,
                )
                try:
                    await server.serve(sockets=[sock])
                finally:
                    for number in (signal.SIGTERM, signal.SIGINT):
                        loop.remove_signal_handler(number)
                    executor.cancel_all("dsh a2a is shutting down")
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(handler.aclose(), options.grace)
                    await executor.aclose()
        finally:
            await opened.close()
        return 128 + received[0] if received else 0
    finally:
        sock.close()


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handling (``dsh a2a`` installs its own, and
    must finish its teardown instead of re-raising the signal)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
