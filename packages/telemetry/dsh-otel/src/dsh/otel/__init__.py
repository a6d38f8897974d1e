"""dsh.otel — OpenTelemetry traces of a dsh runtime, across processes.

Load it from a preset (and configure an OpenTelemetry SDK in the process; without
one every span is a no-op)::

    [[plugin]]
    name = "dsh-otel"       # config = { capture_tool_arguments = false }

It installs :class:`OtelTracing` as ``ctx.tracing`` (dsh-core's tracing seam), which
makes spans after the GenAI semantic conventions: ``invoke_agent`` per delegation,
``chat`` per model call, ``execute_tool`` per tool call; and continues the trace in
child processes: W3C ``traceparent`` / ``tracestate`` in ACP ``_meta`` (read back by
``dsh acp``) and ``TRACEPARENT`` / ``TRACESTATE`` in the environment of Codex and
Claude Code children. Only ``opentelemetry-api`` is needed at run time, unless
``DSH_OTEL=1`` (``--otel``) or ``configure_sdk = true`` has :func:`configure_sdk` set up
the SDK from the ``OTEL_*`` variables (the ``dsh-otel[sdk]`` extra).
"""

from dsh.otel._plugin import OtelConfig, plugin
from dsh.otel._sdk import OtelSdkError, configure_sdk
from dsh.otel._tracing import INSTRUMENTATION_NAME, W3C_KEYS, OtelTracing

__all__ = [
    "INSTRUMENTATION_NAME",
    "W3C_KEYS",
    "OtelConfig",
    "OtelSdkError",
    "OtelTracing",
    "configure_sdk",
    "plugin",
]
