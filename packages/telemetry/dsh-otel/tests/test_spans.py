"""In-process spans: a root agent's turn, its model and tool calls, a spawn child's
delegation with a tool round trip, all parented correctly (in-memory exporter)."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags
from pydantic import BaseModel

from dsh.core import Context, Tool, ToolContext, parse_preset
from dsh.core.plugins import PluginError
from dsh.core.tracing import NO_TRACING
from dsh.otel import OtelTracing

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PRESET = """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{ name = "subagent", arguments = { description = "look it up", prompt = "find x" } }]
[[agent.model.options.replies]]
text = "parent done: {tool_results}"

[[plugin]]
name = "dsh-otel"

[[plugin]]
name = "dsh-subagent-spawn-in-process"

[[plugin]]
name = "dsh-tool-subagent"
config.provider = "spawn"
config.tool_name = "subagent"
config.max_depth = 3
config.agent_options.model.adapter = "scripted"
config.agent_options.model.options.replies = [
  { tool_calls = [{ name = "lookup", arguments = { key = "x" } }] },
  { text = "child found {tool_results}" },
]
"""


class LookupArgs(BaseModel):
    key: str


def lookup_tool(seen: list[dict[str, str]]) -> Tool:
    async def lookup(args: LookupArgs, tctx: ToolContext) -> str:
        # the tracing seam as a provider would use it: the current span's W3C headers
        seen.append(tctx.agent.ctx.tracing.headers())
        return f"{args.key} = 42"

    return Tool.from_model("lookup", "Look a key up.", LookupArgs, lookup)


async def test_a_spawn_delegation_with_a_tool_call(spans: Any) -> None:
    seen: list[dict[str, str]] = []
    async with Context.open(parse_preset(PRESET)) as ctx:
        assert isinstance(ctx.tracing, OtelTracing)
        ctx.tools.register(lookup_tool(seen))
        parent = ctx.agents.create()
        outcome = await parent.run("go")
        assert outcome.stop_reason == "completed"
        calls = {
            e.data["name"]: e.data["id"] for e in parent.session.events if e.type == "tool/call"
        }

    turn = spans.one("invoke_agent")  # the root agent's turn
    delegation = spans.one("invoke_agent look it up")
    parent_tool = spans.one("execute_tool subagent")
    child_tool = spans.one("execute_tool lookup")
    chats = spans.named("chat")
    assert len(chats) == 4, [s.name for s in spans.all()]

    # one trace; the turn is its root
    assert {spans.trace(s) for s in spans.all()} == {spans.trace(turn)}
    assert turn.parent is None
    assert spans.parent(parent_tool) == spans.id(turn)
    # the delegation nests under the tool call that started it
    assert spans.parent(delegation) == spans.id(parent_tool)
    assert spans.parent(child_tool) == spans.id(delegation)
    parent_chats = [c for c in chats if spans.parent(c) == spans.id(turn)]
    child_chats = [c for c in chats if spans.parent(c) == spans.id(delegation)]
    assert len(parent_chats) == 2
    assert len(child_chats) == 2
    # order: the child's chat, its tool, its chat, inside the delegation's time
    first, second = sorted(child_chats, key=lambda s: s.start_time or 0)
    assert (first.end_time or 0) <= (child_tool.start_time or 0)
    assert (child_tool.end_time or 0) <= (second.start_time or 0)
    assert (delegation.start_time or 0) <= (first.start_time or 0)
    assert (second.end_time or 0) <= (delegation.end_time or 0)

    # attributes (GenAI semantic conventions, plus dsh's own)
    attrs = dict(delegation.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.agent.name"] == "look it up"
    child_id = attrs["gen_ai.agent.id"]
    assert attrs["dsh.subagent.provider"] == "spawn"
    assert attrs["dsh.subagent.label"] == "look it up"
    assert attrs["dsh.subagent.depth"] == 1
    assert attrs["dsh.subagent.stop_reason"] == "completed"
    assert attrs["gen_ai.response.finish_reasons"] == ("completed",)
    child_output = sum(int((c.attributes or {})["gen_ai.usage.output_tokens"]) for c in child_chats)
    assert attrs["gen_ai.usage.output_tokens"] == child_output > 0
    assert attrs["gen_ai.usage.input_tokens"] == 0
    assert delegation.kind == SpanKind.INTERNAL
    assert delegation.status.status_code == StatusCode.UNSET

    tool_attrs = dict(parent_tool.attributes or {})
    assert tool_attrs["gen_ai.operation.name"] == "execute_tool"
    assert tool_attrs["gen_ai.tool.name"] == "subagent"
    assert tool_attrs["gen_ai.tool.call.id"] == calls["subagent"]
    assert "gen_ai.tool.call.arguments" not in tool_attrs  # off by default
    assert dict(child_tool.attributes or {})["gen_ai.tool.name"] == "lookup"

    chat_attrs = dict(second.attributes or {})
    assert chat_attrs["gen_ai.operation.name"] == "chat"
    assert chat_attrs["gen_ai.response.finish_reasons"] == ("end",)
    assert chat_attrs["gen_ai.usage.output_tokens"] == 5  # "child found x = 42"
    assert chat_attrs["dsh.agent.id"] == child_id
    assert second.kind == SpanKind.CLIENT

    turn_attrs = dict(turn.attributes or {})
    assert turn_attrs["dsh.turn.stop_reason"] == "completed"
    assert turn_attrs["gen_ai.usage.output_tokens"] == sum(
        int((c.attributes or {})["gen_ai.usage.output_tokens"]) for c in parent_chats
    )

    # headers() inside the child's tool call: the W3C traceparent of that call's span
    (headers,) = seen
    expected = f"00-{spans.trace(child_tool):032x}-{spans.id(child_tool):016x}-"
    assert headers["traceparent"].startswith(expected)


async def test_continue_from_makes_a_remote_parent_current(spans: Any) -> None:
    preset = parse_preset('[agent.model]\nadapter = "scripted"\n[[plugin]]\nname = "dsh-otel"\n')
    remote = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    async with Context.open(preset) as ctx:
        agent = ctx.agents.create(label="served")
        with ctx.tracing.continue_from({**carrier, "sessionId": "ignored", "dsh": {}}):
            assert trace.get_current_span().get_span_context() == remote
            await agent.run("hello")
        assert not trace.get_current_span().get_span_context().is_valid
        # no traceparent: nothing changes
        with ctx.tracing.continue_from({"tracestate": "a=b"}):
            assert not trace.get_current_span().get_span_context().is_valid
    turn = spans.one("invoke_agent served")
    assert spans.trace(turn) == remote.trace_id
    assert spans.parent(turn) == remote.span_id
    assert spans.parent(spans.one("chat")) == spans.id(turn)


async def test_failures_mark_spans_as_errors(spans: Any) -> None:
    preset = parse_preset(
        """
[agent.model]
adapter = "scripted"
[[agent.model.options.replies]]
tool_calls = [{ name = "broken", arguments = { key = "k" } }]
[[agent.model.options.replies]]
error = "the model is down"

[[plugin]]
name = "dsh-otel"
config = { capture_tool_arguments = true }
"""
    )

    async def broken(args: LookupArgs, tctx: ToolContext) -> str:
        raise RuntimeError("no such key")

    async with Context.open(preset) as ctx:
        ctx.tools.register(Tool.from_model("broken", "Fails.", LookupArgs, broken))
        outcome = await ctx.agents.create().run("go")
    assert outcome.stop_reason == "error"
    tool = spans.one("execute_tool broken")
    assert tool.status.status_code == StatusCode.ERROR
    assert dict(tool.attributes or {})["error.type"] == "RuntimeError"
    assert dict(tool.attributes or {})["gen_ai.tool.call.arguments"] == '{"key": "k"}'
    first, failed = sorted(spans.named("chat"), key=lambda s: s.start_time or 0)
    assert first.status.status_code == StatusCode.UNSET
    assert failed.status.status_code == StatusCode.ERROR
    assert dict(failed.attributes or {})["error.type"] == "ModelError"
    turn = spans.one("invoke_agent")
    assert turn.status.status_code == StatusCode.ERROR
    assert dict(turn.attributes or {})["dsh.turn.stop_reason"] == "error"


async def test_unloading_the_plugin_restores_the_no_op_seam(spans: Any) -> None:
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        loaded = await ctx.plugins.load("dsh-otel")
        assert ctx.tracing.enabled
        with pytest.raises(PluginError, match="a tracer is already installed"):
            await ctx.plugins.load("dsh-otel", id="second")
        assert ctx.tracing.enabled
        with trace.get_tracer("test").start_as_current_span("outer"):
            assert "traceparent" in ctx.tracing.headers()
        await ctx.plugins.unload(loaded.id)
        assert ctx.tracing is NO_TRACING
        with trace.get_tracer("test").start_as_current_span("outer"):
            assert ctx.tracing.headers() == {}
        await ctx.agents.create().run("hello")
    assert spans.all() == []


async def test_an_open_delegation_span_is_ended_at_unload(spans: Any) -> None:
    async with Context.open(parse_preset('[agent.model]\nadapter = "scripted"\n')) as ctx:
        loaded = await ctx.plugins.load("dsh-otel")
        ctx.events.emit("subagent/start", {"run_id": "r1", "provider": "remote", "depth": 1})
        assert "traceparent" in ctx.tracing.headers("r1")
        await ctx.plugins.unload(loaded.id)
    span = spans.one("invoke_agent remote")
    assert dict(span.attributes or {})["dsh.subagent.stop_reason"] == "unfinished"
    assert span.kind == SpanKind.CLIENT  # no local agent under that run id: a remote child


def test_a_non_recording_parent_still_propagates() -> None:
    """headers() of a run whose span does not record (sampled out) still carries the ids."""
    tracing = OtelTracing(Context())
    context = SpanContext(1, 2, is_remote=False, trace_flags=TraceFlags(0))
    tracing._runs["r"] = NonRecordingSpan(context)
    headers = tracing.headers("r")
    assert headers["traceparent"] == f"00-{1:032x}-{2:016x}-00"
