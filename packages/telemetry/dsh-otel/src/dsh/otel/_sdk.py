"""The OpenTelemetry SDK of a dsh process, configured from the standard ``OTEL_*``
variables (``DSH_OTEL=1`` / ``--otel``; needs the ``dsh-otel[sdk]`` extra).

* ``OTEL_TRACES_EXPORTER``: ``otlp`` (the default), ``console``, ``none``, or several
  separated by commas;
* ``otlp`` speaks OTLP/HTTP with protobuf (``OTEL_EXPORTER_OTLP_PROTOCOL`` /
  ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` ``http/protobuf``, the default); the exporter
  reads ``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318``),
  ``..._TRACES_ENDPOINT``, ``..._HEADERS``, ``..._TIMEOUT``, ``..._COMPRESSION``...;
* the SDK reads ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (the resource),
  ``OTEL_TRACES_SAMPLER`` / ``..._ARG`` and ``OTEL_BSP_*`` (the batch processor);
* ``OTEL_SDK_DISABLED=true`` configures nothing.

Spans are batched and flushed when the process exits.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from opentelemetry import trace

from dsh.core import DshError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["OtelSdkError", "configure_sdk"]


class OtelSdkError(DshError):
    """The SDK cannot be configured as the ``OTEL_*`` variables ask."""


_lock = threading.Lock()
_configured = False


def configure_sdk() -> bool:
    """Install an SDK tracer provider as the global one, exporting as the ``OTEL_*``
    variables say; once per process. False (nothing done) when a tracer
    provider is installed already (the application configured its own) or
    ``OTEL_SDK_DISABLED`` is true. :class:`OtelSdkError` when the SDK or the exporter is
    not installed or a variable names something unsupported."""
    global _configured
    env = os.environ
    with _lock:
        if _configured or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            return False
        if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        try:
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import (
                BatchSpanProcessor,
                ConsoleSpanExporter,
            )
        except ImportError as exc:
            raise OtelSdkError(
                f"tracing is on (DSH_OTEL / --otel) but the OpenTelemetry SDK is missing ({exc}):"
                " pip install 'dsh-otel[sdk]'"
            ) from None
        names = [
            name.strip().lower()
            for name in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")
            if name.strip()
        ]
        exporters: list[SpanExporter] = []
        for name in names:
            if name == "none":
                continue
            if name == "console":
                exporters.append(ConsoleSpanExporter())
            elif name == "otlp":
                exporters.append(_otlp_exporter(env))
            else:
                raise OtelSdkError(
                    f"OTEL_TRACES_EXPORTER={name!r} is not supported by dsh-otel: use otlp,"
                    " console or none"
                )
        provider = TracerProvider()  # shut down (what is batched flushed) at exit
        for exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _configured = True
        return True


def _otlp_exporter(env: os._Environ[str]) -> SpanExporter:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol != "http/protobuf":
        raise OtelSdkError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported by dsh-otel: use"
            " http/protobuf (OTLP over HTTP; collectors listen on port 4318)"
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise OtelSdkError(
            f"OTEL_TRACES_EXPORTER=otlp needs the OTLP exporter ({exc}):"
            " pip install 'dsh-otel[sdk]'"
        ) from None
    return OTLPSpanExporter()
