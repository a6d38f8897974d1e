"""The tracing switch and the pieces of the tracing seam that name no agent.

The seam itself, :class:`~dsh.core.tracing.Tracing` (its hooks take the
:class:`~dsh.core.Agent` that called), lives beside the context in
:mod:`dsh.core._context`; this module holds what it and the command line share:
the ``DSH_OTEL`` switch and the no-op call and context the default tracer returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext

from dsh.core._llm import ModelDone
from dsh.core._tools import ToolResult
from dsh.core._turn import TracedCall, TurnOutcome

__all__ = [
    "NO_CALL",
    "NO_CONTEXT",
    "TRACING_PLUGIN",
    "TRACING_SWITCH_ENV",
    "TracedCall",
    "tracing_switched_on",
]


class _NoCall:
    __slots__ = ()

    def end(
        self, outcome: TurnOutcome | ModelDone | ToolResult | None, error: BaseException | None
    ) -> None:
        return None


NO_CALL: TracedCall = _NoCall()
"""What the default tracer's hooks return: a call whose ``end`` does nothing."""

NO_CONTEXT: AbstractContextManager[None] = nullcontext()
"""What the default tracer's ``continue_from`` returns: changes nothing."""


TRACING_SWITCH_ENV = "DSH_OTEL"
"""``DSH_OTEL=1`` turns OpenTelemetry tracing on in this process (``--otel`` on
``dsh acp``, ``dsh a2a`` and ``dsh worker`` sets it): every context opened with a
preset loads the ``dsh-otel`` plugin (when the preset has no enabled row of it), which
configures the OpenTelemetry SDK from the standard ``OTEL_*`` variables. Process
providers pass it, and the ``OTEL_*`` variables, to their children while tracing is on."""

TRACING_PLUGIN = "dsh-otel"
"""The plugin :data:`TRACING_SWITCH_ENV` loads."""


def tracing_switched_on(environ: Mapping[str, str] | None = None) -> bool:
    """Whether :data:`TRACING_SWITCH_ENV` is set to ``1``/``true``/``yes``/``on`` in
    ``environ`` (default ``os.environ``)."""
    import os

    source = os.environ if environ is None else environ
    return source.get(TRACING_SWITCH_ENV, "").strip().lower() in ("1", "true", "yes", "on")
