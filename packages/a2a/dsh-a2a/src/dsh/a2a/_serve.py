"""``dsh a2a``: serve a dsh agent over A2A (JSON-RPC over HTTP, with SSE streaming).

The agent comes from the preset (``--preset``, else ``./dsh.toml``, else the
``standard`` preset when dsh-cli is installed). The server is the SDK's request
handler and routes (agent card at ``/.well-known/agent-card.json``, JSON-RPC at
``/``) in a Starlette app under uvicorn, with :class:`~dsh.a2a.DshAgentExecutor`
running the tasks.

Binding: ``127.0.0.1`` by default. Any other address requires ``--token-env NAME``:
the server then reads the token from that environment variable (removes it from its
own environment, so nothing it starts inherits it, and on Linux blanks it in the
process's initial environment block, ``/proc/<pid>/environ``), and every request must
carry ``Authorization: Bearer <token>`` (``401`` otherwise, before any task exists).
The token is never printed or logged. Several ``--token-env`` give several named
tokens, and each sees only the tasks it created.

Hardening (in front of the routes, see :mod:`dsh.http_guard` and
:mod:`dsh.a2a._timeouts`): a Host/Origin allow-list (``403``), a request body cap
(``--max-body-bytes``, ``413``), a header timeout and an idle timeout; finished tasks
in the memory store are evicted by age (``--task-ttl``) and count (``--max-tasks``).

Ending: SIGTERM (and SIGINT, and SIGHUP: the terminal closed) cancel every running
task (they end ``canceled``), stop accepting connections, let open streams deliver
their last update (``--grace`` seconds at most), dispose every delegation the agents
started (their process trees included) and exit with status 128 + the signal: 143
(130 for SIGINT, 129 for SIGHUP).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from dsh.core import Preset
from dsh.core.argtypes import UsageError, log_to_stderr, served_preset
from dsh.core.lifecycle import on_stop_signals
from dsh.http_guard import BindError, HostPolicy, QuietServer, listen, read_tokens
from dsh.http_guard import host_policy as shared_host_policy

__all__ = ["ServeOptions", "host_policy", "serve_command"]

_log = logging.getLogger("dsh.a2a")


@dataclass
class ServeOptions:
    """What ``dsh a2a`` was asked to do (its command-line options)."""

    preset: str | None = None
    trust: bool = False
    """Use the working directory's ``dsh.toml`` without it being trusted (``--trust``)."""
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str | None = None
    token_envs: list[str] = field(default_factory=list)
    """Environment variables holding the bearer tokens (each one's name names its token)."""
    task_store: str | None = None
    name: str | None = None
    description: str | None = None
    sessions_dir: str | None = None
    record: str | None = None
    """Record into a tape in this directory (``Context.open(record=...)``)."""
    max_contexts: int = 256
    context_idle: float = 1800.0
    grace: float = 5.0
    log_level: str = "warning"
    allow_hosts: list[str] = field(default_factory=list)
    allow_origins: list[str] = field(default_factory=list)
    max_body_bytes: int = 4 * 1024 * 1024
    header_timeout: float = 10.0
    idle_timeout: float = 15.0
    task_ttl: float = 3600.0
    max_tasks: int = 1000
    orphan_grace: float = 30.0
    """Seconds a running task nobody follows any more is kept before it is cancelled."""


def serve_command(options: ServeOptions) -> int:
    """Run the server until a signal; the exit status (0, 2 on a configuration
    problem, 128 + the signal's number after SIGTERM / SIGINT / SIGHUP)."""
    log_to_stderr("dsh a2a", options.log_level)
    try:
        try:
            tokens = read_tokens(options.token_envs, options.host)
        except BindError as exc:
            raise UsageError(str(exc)) from None
        preset = served_preset(options.preset, trust=options.trust)
        return asyncio.run(_serve(options, preset, tokens))
    except UsageError as exc:
        print(f"dsh a2a: {exc}", file=sys.stderr)
        return 2


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


def host_policy(options: ServeOptions) -> HostPolicy:
    """Which ``Host`` / ``Origin`` values the server accepts (see docs/serving-a2a.md and
    :func:`dsh.http_guard.host_policy`)."""
    return shared_host_policy(
        options.host,
        public_url=options.public_url,
        allow_hosts=options.allow_hosts,
        allow_origins=options.allow_origins,
    )


async def _serve(options: ServeOptions, preset: Preset, tokens: dict[str, str]) -> int:
    from a2a.server.routes import (
        create_agent_card_routes,
        create_jsonrpc_routes,
        create_rest_routes,
    )
    from starlette.applications import Starlette

    from dsh.a2a._card import REST_PATH, build_agent_card
    from dsh.a2a._executor import DshAgentExecutor
    from dsh.a2a._orphans import Followers, FollowingContextBuilder, FollowingRequestHandler
    from dsh.a2a._store import TaskStoreError, open_task_store
    from dsh.a2a._timeouts import protocol_class
    from dsh.core import Context
    from dsh.http_guard import BearerAuth, BodyLimit, HostGuard

    try:
        sock = listen(options.host, options.port)
    except BindError as exc:
        raise UsageError(str(exc)) from None
    try:
        port = sock.getsockname()[1]
        url = _public_url(options, port)
        try:
            opened = await open_task_store(
                options.task_store, max_tasks=options.max_tasks, ttl=options.task_ttl
            )
        except TaskStoreError as exc:
            raise UsageError(str(exc)) from None
        received: list[int] = []
        stoppers: list[Callable[[], None]] = []

        def on_signal(number: int) -> None:
            received.append(number)
            for stop in stoppers:
                stop()

        # from here until the task store is closed: SIGTERM, SIGINT and SIGHUP stop the
        # server, and a signal during the teardown finds the handler still there
        stack = contextlib.ExitStack()
        stack.enter_context(on_stop_signals(on_signal))
        try:
            async with Context.open(
                preset, sessions_dir=options.sessions_dir, record=options.record
            ) as ctx:
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
                    bearer=bool(tokens),
                )
                followers = Followers(executor, options.orphan_grace)
                handler = FollowingRequestHandler(
                    agent_executor=executor,
                    task_store=opened.store,
                    agent_card=card,
                    event_stream=opened.event_stream,
                    followers=followers,
                )
                context_builder = FollowingContextBuilder()
                app = Starlette(
                    routes=[
                        *create_agent_card_routes(card),
                        *create_jsonrpc_routes(
                            handler,
                            rpc_url="/",
                            context_builder=context_builder,
                            enable_v0_3_compat=True,
                        ),
                        *create_rest_routes(
                            handler,
                            context_builder=context_builder,
                            path_prefix=REST_PATH,
                            enable_v0_3_compat=True,
                        ),
                    ]
                )
                asgi: Any = BearerAuth(app, tokens, realm="dsh a2a") if tokens else app
                asgi = BodyLimit(
                    asgi, options.max_body_bytes, options.idle_timeout, server="dsh a2a"
                )
                policy = host_policy(options)
                asgi = HostGuard(asgi, policy, server="dsh a2a")
                config = uvicorn.Config(
                    asgi,
                    http=protocol_class(
                        header_timeout=options.header_timeout,
                        idle_timeout=options.idle_timeout,
                        drain_limit=max(options.max_body_bytes, 16 * 1024 * 1024),
                    ),
                    log_config=None,
                    access_log=False,
                    lifespan="off",
                    log_level=options.log_level,
                    timeout_graceful_shutdown=max(int(options.grace), 1),
                )
                server = QuietServer(config)

                def stop_serving() -> None:
                    executor.cancel_all("dsh a2a is shutting down")
                    server.should_exit = True

                stoppers.append(stop_serving)
                if received:  # a signal came while the server was being set up
                    stop_serving()
                if len(tokens) > 1:
                    names = ", ".join(f"${name}" for name in tokens)
                    auth = f"bearer tokens from {names}, each sees only its own tasks"
                elif tokens:
                    auth = f"bearer token from ${next(iter(tokens))}"
                else:
                    auth = "none (loopback)"
                print(
                    f'dsh a2a: serving "{name}" at {url} (agent card: {url}.well-known/'
                    f"agent-card.json; task store: {opened.description}; auth: {auth};"
                    f" {policy.describe()})",
                    file=sys.stderr,
                    flush=True,
                )
                try:
                    await server.serve(sockets=[sock])
                finally:
                    followers.close()
                    executor.cancel_all("dsh a2a is shutting down")
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(handler.aclose(), options.grace)
                    await executor.aclose()
        finally:
            try:
                await opened.close()
            finally:
                stack.close()
        return 128 + received[0] if received else 0
    finally:
        sock.close()
