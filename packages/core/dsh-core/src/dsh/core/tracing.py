"""The tracing seam (``ctx.tracing``): the base :class:`Tracing` that traces nothing,
how a tracer is installed, the ``DSH_OTEL`` switch, and :func:`redact_urls`, which
keeps credentials in URLs out of spans, logs and messages.
"""

from dsh.core._context import NO_TRACING, Tracing, install_tracing
from dsh.core._redact import redact_urls
from dsh.core._tracing import TRACING_SWITCH_ENV, TracedCall, tracing_switched_on

__all__ = [
    "NO_TRACING",
    "TRACING_SWITCH_ENV",
    "TracedCall",
    "Tracing",
    "install_tracing",
    "redact_urls",
    "tracing_switched_on",
]
