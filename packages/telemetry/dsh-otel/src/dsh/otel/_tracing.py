"""``OtelTracing``: dsh's tracing seam (``ctx.tracing``) on the OpenTelemetry API.

Spans (GenAI semantic conventions):

* ``invoke_agent <label or provider>`` — one per delegation, from the runtime's
  ``subagent/start`` to its ``subagent/end`` (bus events). Its parent is the span
  current where the run was started: the delegating tool call's ``execute_tool``.
* ``invoke_agent [<label>]`` — one per turn of an agent that is not an in-process
  child under a delegation span (a root agent, the agent ``dsh acp`` serves): its
  parent is the span current where the turn runs (the caller's own span, or the
  remote parent :meth:`OtelTracing.continue_from` made current).
* ``chat <model>`` — one per model call.
* ``execute_tool <tool>`` — one per tool invocation; current while the tool runs,
  so a delegation the tool starts nests under it.

An in-process child's spans go under its delegation's ``invoke_agent``, looked up
explicitly (the in-process providers use the child agent's id as the run id), since
the child's turn may run in any task; any other agent's under its turn span, which
is current in the task running the turn.

Text that comes from errors (status descriptions, captured tool arguments) goes
through :func:`dsh.core.tracing.redact_urls`: no span carries a credential in a URL.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from dsh.core import Agent, BusEvent, Context, ModelRequest, ToolResult, TurnOutcome
from dsh.core.lifecycle import Disposer
from dsh.core.models import ModelDone, ToolCall
from dsh.core.tracing import TracedCall, Tracing, redact_urls

__all__ = ["INSTRUMENTATION_NAME", "W3C_KEYS", "OtelTracing"]

_log = logging.getLogger("dsh.otel")

INSTRUMENTATION_NAME = "dsh.otel"
"""The instrumentation scope of every span this package makes."""
VERSION = "0.1.0"

W3C_KEYS = ("traceparent", "tracestate", "baggage")
"""The header names W3C trace context (and baggage) travel under."""

DEFAULT_AGENT_NAME = "dsh"
"""``gen_ai.agent.name`` of an agent without a label."""

_RUN_START = "subagent/start"
_RUN_END = "subagent/end"
_DESCRIPTION_LIMIT = 512


class OtelTracing(Tracing):
    """Spans for every delegation, model call and tool call of one context.

    ``tracer_provider`` defaults to the global one (``trace.set_tracer_provider``);
    without an SDK configured every span is a no-op. :meth:`attach` subscribes to
    the context's bus; the disposer it returns ends what is still open.
    """

    __slots__ = ("_agent_name", "_capture_arguments", "_ctx", "_runs", "_tracer")

    enabled = True

    def __init__(
        self,
        ctx: Context,
        tracer_provider: TracerProvider | None = None,
        *,
        capture_tool_arguments: bool = False,
        agent_name: str = DEFAULT_AGENT_NAME,
    ) -> None:
        self._ctx = ctx
        self._agent_name = agent_name
        self._tracer: Tracer = trace.get_tracer(
            INSTRUMENTATION_NAME, VERSION, tracer_provider=tracer_provider
        )
        self._capture_arguments = capture_tool_arguments
        self._runs: dict[str, Span] = {}
        """Open ``invoke_agent`` spans by run id."""

    def attach(self) -> Disposer:
        """Listen to the bus for delegations; the disposer stops and ends open spans."""
        bus = self._ctx.events
        offs = [bus.on(_RUN_START, self._on_run_start), bus.on(_RUN_END, self._on_run_end)]

        def detach() -> None:
            for off in offs:
                off()
            runs, self._runs = self._runs, {}
            for span in runs.values():
                span.set_attribute("dsh.subagent.stop_reason", "unfinished")
                span.end()

        return detach

    # -- the seam ---------------------------------------------------------------------

    def headers(self, run_id: str | None = None) -> dict[str, str]:
        """W3C headers of run ``run_id``'s ``invoke_agent`` span, else of the current span."""
        span = self._runs.get(run_id) if run_id is not None else None
        carrier: dict[str, str] = {}
        try:
            propagate.inject(carrier, context=trace.set_span_in_context(span) if span else None)
        except Exception:  # a misconfigured propagator must not fail a delegation
            _log.exception("injecting the trace context failed")
            return {}
        return carrier

    def continue_from(self, headers: Mapping[str, object]) -> AbstractContextManager[None]:
        """Make the remote parent in ``headers`` current while the block runs."""
        carrier = {key: value for key in W3C_KEYS if isinstance(value := headers.get(key), str)}
        if "traceparent" not in carrier:
            return nullcontext()
        try:
            remote = propagate.extract(carrier)
        except Exception:
            _log.exception("extracting the caller's trace context failed")
            return nullcontext()
        return _Current(remote)

    def turn(self, agent: Agent, turn: int) -> TracedCall:
        """Start an ``invoke_agent`` span for the turn (current until it ends), unless
        the agent is an in-process child under a delegation span already."""
        if agent.id in self._runs:
            return _NO_CALL
        try:
            attributes: dict[str, AttributeValue] = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.id": agent.id,
                "gen_ai.conversation.id": agent.id,
                "dsh.agent.id": agent.id,
                "dsh.agent.depth": agent.depth,
                "dsh.turn": turn,
                "gen_ai.agent.name": agent.label or self._agent_name,
            }
            if agent.model.model:
                attributes["gen_ai.request.model"] = agent.model.model
            span = self._tracer.start_span(
                f"invoke_agent {agent.label}" if agent.label else "invoke_agent",
                kind=SpanKind.INTERNAL,
                attributes=attributes,
            )
            return _Call(span, agent, len(agent.session) - 1)
        except Exception:
            _log.exception("starting a turn span failed")
            return _NO_CALL

    def model_call(self, agent: Agent, request: ModelRequest) -> TracedCall:
        """Start a ``chat`` span (current until the call ends)."""
        try:
            attributes: dict[str, AttributeValue] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.conversation.id": agent.id,
                "dsh.agent.id": agent.id,
                "dsh.agent.depth": agent.depth,
            }
            if request.model:
                attributes["gen_ai.request.model"] = request.model
            attributes["gen_ai.agent.name"] = agent.label or self._agent_name
            span = self._tracer.start_span(
                f"chat {request.model}" if request.model else "chat",
                context=self._parent(agent),
                kind=SpanKind.CLIENT,
                attributes=attributes,
            )
            return _Call(span)
        except Exception:
            _log.exception("starting a chat span failed")
            return _NO_CALL

    def tool_call(self, agent: Agent, call: ToolCall) -> TracedCall:
        """Start an ``execute_tool`` span (current while the tool runs)."""
        try:
            attributes: dict[str, AttributeValue] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
                "gen_ai.tool.type": "function",
                "gen_ai.conversation.id": agent.id,
                "dsh.agent.id": agent.id,
            }
            tool = agent.tools.get(call.name)
            if tool is not None and tool.description:
                attributes["gen_ai.tool.description"] = tool.description[:_DESCRIPTION_LIMIT]
            if self._capture_arguments:
                attributes["gen_ai.tool.call.arguments"] = redact_urls(
                    json.dumps(call.arguments, default=str, ensure_ascii=False)
                )
            span = self._tracer.start_span(
                f"execute_tool {call.name}",
                context=self._parent(agent),
                kind=SpanKind.INTERNAL,
                attributes=attributes,
            )
            return _Call(span)
        except Exception:
            _log.exception("starting an execute_tool span failed")
            return _NO_CALL

    # -- delegations ------------------------------------------------------------------

    def _parent(self, agent: Agent) -> otel_context.Context | None:
        """The context an agent's span starts in: an in-process child's delegation span,
        else None (the current context)."""
        span = self._runs.get(agent.id)
        return trace.set_span_in_context(span) if span is not None else None

    def _on_run_start(self, event: BusEvent) -> None:
        data = event.data
        run_id = str(data.get("run_id"))
        provider = data.get("provider")
        label = data.get("label")
        parent_agent = data.get("parent_agent")
        name = str(label or provider or "subagent")
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": run_id,
            "gen_ai.agent.name": name,
            "dsh.subagent.run_id": run_id,
        }
        if provider is not None:
            attributes["dsh.subagent.provider"] = str(provider)
        if label is not None:
            attributes["dsh.subagent.label"] = str(label)
        if isinstance(data.get("depth"), int):
            attributes["dsh.subagent.depth"] = data["depth"]
        if parent_agent is not None:
            attributes["dsh.subagent.parent_agent"] = str(parent_agent)
        if data.get("continuable"):
            attributes["dsh.subagent.continuable"] = True
            if isinstance(data.get("turn"), int):
                attributes["dsh.subagent.turn"] = data["turn"]
        # the span current here is the delegating tool call's; when nothing is current
        # (a run started outside any traced call) the parent agent's own delegation
        parent: otel_context.Context | None = None
        if not trace.get_current_span().get_span_context().is_valid:
            above = self._runs.get(str(parent_agent))
            if above is not None:
                parent = trace.set_span_in_context(above)
        # in-process runs have a live agent under the run's id; others are remote (CLIENT)
        local = self._ctx.agents.get(run_id) is not None
        previous = self._runs.pop(run_id, None)
        if previous is not None:  # a run id reused before its end: close the old span
            previous.end()
        self._runs[run_id] = self._tracer.start_span(
            f"invoke_agent {name}",
            context=parent,
            kind=SpanKind.INTERNAL if local else SpanKind.CLIENT,
            attributes=attributes,
        )

    def _on_run_end(self, event: BusEvent) -> None:
        data = event.data
        span = self._runs.pop(str(data.get("run_id")), None)
        if span is None:
            return
        stop = str(data.get("stop_reason"))
        span.set_attribute("dsh.subagent.stop_reason", stop)
        span.set_attribute("gen_ai.response.finish_reasons", [stop])
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            _usage_attributes(span, usage)
        if stop != "completed":
            diagnostic = data.get("diagnostic")
            span.set_attribute("error.type", stop)
            _error_status(span, f"{stop}: {diagnostic}" if diagnostic else stop)
        span.end()


def _error_status(span: Span, description: str) -> None:
    """Mark ``span`` failed with ``description``, credentials in URLs hidden, capped."""
    span.set_status(Status(StatusCode.ERROR, redact_urls(description)[:_DESCRIPTION_LIMIT]))


def _usage_attributes(span: Span, usage: Mapping[str, Any]) -> None:
    """``SubagentUsage`` (a mapping of the fields that are set) as span attributes."""
    for key, attribute in (
        ("input_tokens", "gen_ai.usage.input_tokens"),
        ("output_tokens", "gen_ai.usage.output_tokens"),
        ("cached_input_tokens", "gen_ai.usage.cache_read.input_tokens"),
        ("reasoning_tokens", "dsh.usage.reasoning_tokens"),
    ):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            span.set_attribute(attribute, value)
    cost = usage.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        span.set_attribute("dsh.usage.cost_usd", float(cost))
    if usage.get("incomplete"):
        span.set_attribute("dsh.usage.incomplete", True)


class _Current:
    """Makes an OpenTelemetry context current while entered (same task in and out)."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: otel_context.Context) -> None:
        self._context = context
        self._token: object = None

    def __enter__(self) -> None:
        self._token = otel_context.attach(self._context)

    def __exit__(self, *exc_info: object) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]


class _Call:
    """A turn's ``invoke_agent``, a ``chat`` or an ``execute_tool`` span, current from
    its start until :meth:`end` (``agent`` and ``start``, the index of its
    ``turn/start``: a turn's, whose usage is summed at the end)."""

    __slots__ = ("_agent", "_span", "_start", "_token")

    def __init__(self, span: Span, agent: Agent | None = None, start: int = 0) -> None:
        self._span = span
        self._agent = agent
        self._start = start
        self._token = otel_context.attach(trace.set_span_in_context(span))

    def end(
        self, outcome: ModelDone | ToolResult | TurnOutcome | None, error: BaseException | None
    ) -> None:
        span = self._span
        try:
            if isinstance(outcome, TurnOutcome):
                self._end_turn(outcome, error)
            elif error is not None:
                span.set_attribute("error.type", type(error).__qualname__)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            elif isinstance(outcome, ToolResult):
                if outcome.is_error:
                    span.set_attribute("error.type", "tool_error")
                    span.set_status(Status(StatusCode.ERROR, "the tool returned an error"))
            elif outcome is None:
                span.set_attribute("error.type", "incomplete_stream")
                span.set_status(
                    Status(StatusCode.ERROR, "the model stream ended without a final event")
                )
            else:
                span.set_attribute("gen_ai.response.finish_reasons", [outcome.stop_reason])
                if outcome.usage is not None:
                    span.set_attribute("gen_ai.usage.input_tokens", outcome.usage.input_tokens)
                    span.set_attribute("gen_ai.usage.output_tokens", outcome.usage.output_tokens)
        except Exception:
            _log.exception("recording a span's outcome failed")
        finally:
            span.end()
            otel_context.detach(self._token)

    def _end_turn(self, outcome: TurnOutcome, error: BaseException | None) -> None:
        span = self._span
        stop = outcome.stop_reason
        span.set_attribute("dsh.turn.stop_reason", stop)
        span.set_attribute("gen_ai.response.finish_reasons", [stop])
        agent = self._agent
        if agent is not None:
            input_tokens = output_tokens = 0
            seen = False
            events = agent.session.events
            for index in range(self._start, len(events)):
                event = events[index]
                usage = event.data.get("usage") if event.type == "assistant/message" else None
                if isinstance(usage, Mapping):
                    seen = True
                    input_tokens += int(usage.get("input_tokens", 0))
                    output_tokens += int(usage.get("output_tokens", 0))
            if seen:
                span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        if stop != "completed":
            reason = type(error).__qualname__ if error is not None else stop
            span.set_attribute("error.type", reason)
            _error_status(span, f"{stop}: {outcome.error}" if outcome.error else stop)


class _NoCall:
    __slots__ = ()

    def end(
        self, outcome: ModelDone | ToolResult | TurnOutcome | None, error: BaseException | None
    ) -> None:
        return None


_NO_CALL = _NoCall()
