"""The ``acp`` library's own OpenTelemetry spans, kept inside the caller's trace.

``agent-client-protocol`` opens an ``acp.request`` (or ``acp.notification``) span
around every message it dispatches, whenever ``opentelemetry`` is importable. Served
as is, each would start a trace of its own: ``initialize``, ``session/new`` and
``session/prompt`` make three orphan traces per delegation. So, while an agent is
served here:

* a request that carries W3C trace context in ``params._meta`` (``traceparent``,
  ``tracestate``, ``baggage``, as a dsh parent sends with ``session/prompt``) has its
  ``acp.request`` span made a child of that remote parent (:class:`MessageContext`);
* any other message's span is not made at all: the library's spans are only ever
  children of a current span, never roots (:func:`quiet_acp_root_spans`).

Without ``opentelemetry`` installed all of this does nothing.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

__all__ = ["MessageContext", "quiet_acp_root_spans"]

_W3C_KEYS = ("traceparent", "tracestate", "baggage")


class _ChildSpansOnly:
    """The ``acp`` library's tracer, making spans only under a current span."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer

    def start_as_current_span(self, name: str, *args: Any, **kwargs: Any) -> Any:
        from opentelemetry import trace

        if not trace.get_current_span().get_span_context().is_valid:
            return nullcontext()
        return self.tracer.start_as_current_span(name, *args, **kwargs)


def quiet_acp_root_spans() -> None:
    """Have the ``acp`` library open its spans only under a current span (idempotent)."""
    try:
        from acp import telemetry
    except ImportError:  # pragma: no cover - the acp library is a dependency
        return
    tracer = getattr(telemetry, "TRACER", None)
    if tracer is not None and not isinstance(tracer, _ChildSpansOnly):
        telemetry.TRACER = _ChildSpansOnly(tracer)  # type: ignore[assignment]


class MessageContext:
    """Makes each received message's trace context current in the receive loop, so
    the task the ``acp`` connection creates for the message (a copy of that context)
    opens its span under the sender's. Call :meth:`enter` for each message, in the
    task that receives them."""

    def __init__(self) -> None:
        try:
            from opentelemetry import context, propagate
        except ImportError:
            self._otel: Any = None
        else:
            self._otel = (context, propagate)
        self._token: object = None

    def enter(self, message: dict[str, Any]) -> None:
        """The context of ``message``: its remote parent, else an empty one."""
        if self._otel is None:
            return
        context, propagate = self._otel
        if self._token is not None:
            context.detach(self._token)
            self._token = None
        carrier = _carrier(message)
        try:
            remote = propagate.extract(carrier) if "traceparent" in carrier else None
        except Exception:  # a malformed header must not break the connection
            remote = None
        if remote is not None:
            self._token = context.attach(remote)
        elif context.get_current():  # something current: the next message starts clean
            self._token = context.attach(context.Context())


def _carrier(message: dict[str, Any]) -> dict[str, str]:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return {}
    return {key: value for key in _W3C_KEYS if isinstance(value := meta.get(key), str)}
