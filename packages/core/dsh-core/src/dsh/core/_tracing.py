"""The tracing seam (``ctx.tracing``): how core, providers and servers take part in
distributed tracing without importing a tracing library.

The default, :data:`NO_TRACING`, does nothing: :meth:`Tracing.headers` is empty,
:meth:`Tracing.continue_from` changes nothing, and the agent loop never calls the
per-call hooks because ``enabled`` is False, so an untraced runtime pays one
attribute check per turn, per model call and per tool call. A tracing plugin (``dsh-otel``)
subclasses :class:`Tracing` and installs it with :func:`install_tracing`.

Who calls what:

* the agent loop, only when ``enabled``: :meth:`Tracing.turn` when a turn starts,
  :meth:`Tracing.model_call` before each model call and :meth:`Tracing.tool_call`
  before each tool invocation. The :class:`TracedCall` a hook returns may stay
  current for the tracing library (what the call does nests under it) until the
  loop calls its ``end``, once, in the same task;
* a provider that starts a child process: :meth:`Tracing.headers` for the W3C
  ``traceparent`` / ``tracestate`` to hand the child (ACP ``_meta``, environment);
* a server that runs a turn for a remote caller (``dsh acp``):
  :meth:`Tracing.continue_from` with the headers the caller sent, around the turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Protocol

from dsh.core._effects import Disposer
from dsh.core._llm import ModelDone, ModelRequest, ToolCall
from dsh.core._tools import ToolResult
from dsh.core._turn import TracedCall, TurnOutcome

if TYPE_CHECKING:
    from dsh.core._agent import Agent

__all__ = [
    "NO_TRACING",
    "TRACING_PLUGIN",
    "TRACING_SWITCH_ENV",
    "TracedCall",
    "Tracing",
    "TracingHost",
    "install_tracing",
    "tracing_switched_on",
]


class _NoCall:
    __slots__ = ()

    def end(
        self, outcome: TurnOutcome | ModelDone | ToolResult | None, error: BaseException | None
    ) -> None:
        return None


_NO_CALL = _NoCall()
_NO_CONTEXT: AbstractContextManager[None] = nullcontext()


class Tracing:
    """The seam a tracing plugin implements (this base traces nothing).

    A subclass sets ``enabled = True`` to have the agent loop call :meth:`turn`,
    :meth:`model_call` and :meth:`tool_call`.
    """

    __slots__ = ()

    enabled: bool = False
    """True if the agent loop should report model and tool calls."""

    def headers(self, run_id: str | None = None) -> dict[str, str]:
        """W3C trace-context headers to hand a child process: ``traceparent`` and,
        where there is one, ``tracestate`` (and ``baggage``). With ``run_id``, those of
        that delegation's span when the tracer has one; else those of the current span.
        Empty when nothing is traced (always, by default). A new dict each call."""
        return {}

    def continue_from(self, headers: Mapping[str, object]) -> AbstractContextManager[None]:
        """A context manager that makes the remote parent in ``headers`` (W3C keys
        ``traceparent``, ``tracestate``, ``baggage``; other keys are ignored) current
        while it is entered, so a turn run inside it continues the caller's trace.
        By default: does nothing."""
        return _NO_CONTEXT

    def turn(self, agent: Agent, turn: int) -> TracedCall:
        """``agent`` started turn number ``turn`` (its ``turn/start`` is in the log;
        only when ``enabled``). Ended after the ``turn/end``."""
        return _NO_CALL

    def model_call(self, agent: Agent, request: ModelRequest) -> TracedCall:
        """``agent`` is about to call its model with ``request`` (only when ``enabled``)."""
        return _NO_CALL

    def tool_call(self, agent: Agent, call: ToolCall) -> TracedCall:
        """``agent`` is about to run the tool ``call`` (only when ``enabled``)."""
        return _NO_CALL


NO_TRACING = Tracing()
"""The default ``ctx.tracing``: traces nothing."""


class TracingHost(Protocol):
    """What :func:`install_tracing` needs of a context: its ``tracing`` seam."""

    tracing: Tracing


def install_tracing(ctx: TracingHost, tracing: Tracing) -> Disposer:
    """Make ``tracing`` the context's ``ctx.tracing``; the disposer puts the default
    back. A second tracer while one is installed raises ``ValueError``."""
    if ctx.tracing is not NO_TRACING:
        raise ValueError(
            f"a tracer is already installed in this context ({type(ctx.tracing).__name__})"
        )
    ctx.tracing = tracing

    def remove() -> None:
        if ctx.tracing is tracing:
            ctx.tracing = NO_TRACING

    return remove


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
