"""Connecting to Temporal: address and namespace from the configuration or the
standard environment; credentials from the environment only.

The environment is read the way the ``temporal`` CLI reads it (the SDK's
``temporalio.envconfig``): ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``,
``TEMPORAL_API_KEY``, ``TEMPORAL_TLS``, ``TEMPORAL_TLS_CLIENT_CERT_PATH``,
``TEMPORAL_TLS_CLIENT_KEY_PATH``, ``TEMPORAL_TLS_SERVER_CA_CERT_PATH``,
``TEMPORAL_TLS_SERVER_NAME``, a profile (``TEMPORAL_PROFILE``) of a config file
(``TEMPORAL_CONFIG_FILE``, default ``~/.config/temporalio/temporal.toml``).
An API key turns TLS on (Temporal Cloud).

The SDK's Rust core writes its log lines (retries while the server is unreachable:
``WARN temporalio_client::retry: gRPC call ... retried 5 times``) to *stdout* unless
told otherwise, which breaks ``dsh run --json``. Before the first connection this
process installs a default SDK runtime that forwards them to the Python logger
``temporalio.core`` instead (stderr, through ``logging``; warnings and errors only).
A program that set its own default runtime keeps it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = [
    "CORE_LOGGER",
    "DEFAULT_ADDRESS",
    "connect",
    "connect_kwargs",
    "describe_target",
    "route_core_logs",
]

DEFAULT_ADDRESS = "localhost:7233"
CORE_LOGGER = "temporalio.core"
"""The Python logger the SDK core's log lines are forwarded to (never stdout)."""

_routing = threading.Lock()
_routed = False


def route_core_logs() -> None:
    """Make the SDK's default runtime forward its core's logs to :data:`CORE_LOGGER`
    (once per process; a default runtime set by someone else is left alone)."""
    global _routed
    with _routing:
        if _routed:
            return
        _routed = True
        from temporalio import runtime as sdk

        existing = getattr(getattr(sdk, "_runtime_ref", None), "_default_runtime", None)
        if existing is not None:
            return
        forwarding = sdk.LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER))
        logs = sdk.LoggingConfig(
            filter=sdk.TelemetryFilter(core_level="WARN", other_level="ERROR"),
            forwarding=forwarding,
        )
        with contextlib.suppress(RuntimeError):  # set meanwhile: the program's choice
            sdk.Runtime.set_default(sdk.Runtime(telemetry=sdk.TelemetryConfig(logging=logs)))


def connect_kwargs(address: str | None, namespace: str | None) -> dict[str, Any]:
    """Keyword arguments for ``Client.connect``: the environment's profile, then
    ``address`` / ``namespace`` where given, then the defaults."""
    from temporalio.envconfig import ClientConfig

    kwargs: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    if address:
        kwargs["target_host"] = address
    if namespace:
        kwargs["namespace"] = namespace
    kwargs.setdefault("target_host", DEFAULT_ADDRESS)
    kwargs.setdefault("namespace", "default")
    return kwargs


def describe_target(kwargs: dict[str, Any]) -> str:
    """``host:port (namespace N, TLS)`` for messages (never a credential)."""
    tls = kwargs.get("tls")
    secure = ", TLS" if tls else ""
    key = ", API key" if kwargs.get("api_key") else ""
    return f"{kwargs['target_host']} (namespace {kwargs['namespace']}{secure}{key})"


async def connect(
    address: str | None, namespace: str | None, *, identity: str | None = None
) -> Client:
    """A connected client (raises the SDK's error when the server cannot be reached)."""
    from datetime import timedelta

    from temporalio.client import Client

    route_core_logs()
    kwargs = connect_kwargs(address, namespace)
    return await Client.connect(**kwargs, identity=identity, connect_timeout=timedelta(seconds=10))
