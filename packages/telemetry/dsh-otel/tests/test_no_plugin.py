"""Without the dsh-otel plugin nothing is traced and nothing changes, even with an
OpenTelemetry SDK configured and a span current."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace

from dsh.core import Context, parse_preset
from dsh.core.tracing import NO_TRACING, Tracing

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{ name = "subagent", arguments = { description = "d", prompt = "p" } }]
[[agent.model.options.replies]]
text = "done: {tool_results}"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config.provider = "spawn"
config.agent_options.model.adapter = "scripted"
config.agent_options.model.options.replies = [{ text = "child answer" }]
"""


async def test_without_the_plugin_the_seam_is_a_no_op(spans: Any) -> None:
    tracer = trace.get_tracer("the-application")
    async with Context.open(parse_preset(PRESET)) as ctx:
        assert ctx.tracing is NO_TRACING
        assert type(ctx.tracing) is Tracing
        assert not ctx.tracing.enabled
        with tracer.start_as_current_span("application span") as span:
            # the application's own span is current, yet dsh hands children nothing
            assert ctx.tracing.headers() == {}
            assert ctx.tracing.headers("any-run") == {}
            with ctx.tracing.continue_from(
                {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
            ):
                assert trace.get_current_span() is span
            outcome = await ctx.agents.create().run("go")
    assert outcome.stop_reason == "completed"
    assert spans.all() == []  # no dsh span at all
    assert [s.name for s in spans.exporter.get_finished_spans()] == ["application span"]


def test_the_default_seam_returns_fresh_empty_headers() -> None:
    first = NO_TRACING.headers()
    first["traceparent"] = "mutated by a caller"
    assert NO_TRACING.headers() == {}
