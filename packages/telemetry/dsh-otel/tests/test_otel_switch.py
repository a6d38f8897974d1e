"""The one switch (issue 21 item 13): ``DSH_OTEL=1`` / ``--otel`` configures the
OpenTelemetry SDK from the standard ``OTEL_*`` variables, and the acp provider passes
them on, so a ``dsh run`` parent and its ``dsh acp`` child (real processes) export one
trace to an OTLP/HTTP collector stand-in on 127.0.0.1: one root, no orphan
``acp.request`` traces, ``gen_ai.agent.name`` on every turn and chat span."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import PROTOCOL_VERSION, Client
from acp.schema import TextContentBlock
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from dsh.testing.fixtures import delegating_parent, dsh_acp_child, keyed_preset, plugin_rows
from dsh.testing.processes import run_cli

pytestmark = pytest.mark.timeout(120)

CHILD = keyed_preset(default=[{"text": "child says {prompt}"}])


def parent_preset(child: Path) -> str:
    args = ["-m", "dsh.cli", "acp", "--preset", str(child)]
    acp = {
        "command": sys.executable,
        "args": args,
        "depth_limit": True,
        "env": {"OTEL_SERVICE_NAME": "dsh-child"},
    }
    return delegating_parent("work", then="parent done: {tool_results}") + plugin_rows(
        ("dsh-subagent-acp", acp),
        ("dsh-tool-subagent", {"provider": "acp", "tool_name": "subagent", "max_depth": 3}),
    )


@dataclass
class Span:
    service: str
    scope: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


class Collector:
    """OTLP/HTTP (protobuf) on 127.0.0.1: keeps every span it receives."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.add(request)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, request: ExportTraceServiceRequest) -> None:
        with self.lock:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attributes = {a.key: _value(a.value) for a in span.attributes}
                        self.spans.append(
                            Span(
                                resource.get("service.name", ""),
                                scope_spans.scope.name,
                                span.name,
                                span.trace_id.hex(),
                                span.span_id.hex(),
                                span.parent_span_id.hex(),
                                attributes,
                            )
                        )

    def snapshot(self) -> list[Span]:
        with self.lock:
            return list(self.spans)

    def wait_for(self, done: Any, timeout: float = 30.0) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            spans = self.snapshot()
            if done(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def collector() -> Iterator[Collector]:
    found = Collector()
    found.thread.start()
    try:
        yield found
    finally:
        found.server.shutdown()
        found.server.server_close()


def otel_env(collector: Collector, service: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DSH_OTEL"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
        OTEL_SERVICE_NAME=service,
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    return env


def test_dsh_otel_traces_a_delegation_to_dsh_acp_as_one_trace(
    tmp_path: Path, collector: Collector
) -> None:
    child = tmp_path / "child.toml"
    child.write_text(CHILD, encoding="utf-8")
    parent = tmp_path / "parent.toml"
    parent.write_text(parent_preset(child), encoding="utf-8")
    env = otel_env(collector, "dsh-parent")
    env["DSH_OTEL"] = "1"
    done = run_cli(
        "dsh.cli", ["run", "--preset", str(parent), "go"], cwd=tmp_path, env=env, timeout=90
    )
    assert done.returncode == 0, done.stderr
    assert "child says work" in done.stdout

    def complete(spans: list[Span]) -> bool:
        names = {(s.service, s.name) for s in spans}
        return {("dsh-parent", "invoke_agent lead"), ("dsh-child", "invoke_agent")} <= names

    spans = collector.wait_for(complete)
    summary = [(s.service, s.scope, s.name, s.parent_id) for s in spans]
    assert complete(spans), "\n".join(map(str, summary))
    # one trace for the whole delegation, one root: the parent's turn (dsh run: "lead")
    assert len({s.trace_id for s in spans}) == 1, summary
    roots = [s for s in spans if not s.parent_id]
    assert [(r.service, r.name) for r in roots] == [("dsh-parent", "invoke_agent lead")], summary
    # the served turn continues the parent's delegation span
    by_id = {s.span_id: s for s in spans}
    served = next(s for s in spans if s.service == "dsh-child" and s.name == "invoke_agent")
    assert by_id[served.parent_id].name == "invoke_agent child"
    # the acp library's spans: the prompt's under the delegation too, none a root
    acp = [s for s in spans if s.name.startswith("acp.")]
    assert all(s.parent_id in by_id for s in acp), summary
    assert any(s.attributes.get("method") == "session/prompt" for s in acp), summary
    # gen_ai.agent.name on every turn and chat span, in both processes
    named = [s for s in spans if s.name.startswith(("invoke_agent", "chat"))]
    names = {(s.service, s.name, s.attributes.get("gen_ai.agent.name")) for s in named}
    assert names == {
        ("dsh-parent", "invoke_agent lead", "lead"),
        ("dsh-parent", "chat", "lead"),
        ("dsh-parent", "invoke_agent child", "child"),
        ("dsh-child", "invoke_agent", "dsh"),  # the served turn: no label, the default
        ("dsh-child", "chat", "dsh"),
    }, summary


class _Quiet(Client):
    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None


@pytest.mark.anyio
async def test_dsh_acp_otel_flag_traces_a_served_turn(tmp_path: Path, collector: Collector) -> None:
    preset = tmp_path / "agent.toml"
    preset.write_text(CHILD, encoding="utf-8")
    env = otel_env(collector, "dsh-editor-agent")
    args = ("--otel", "--preset", str(preset))
    async with dsh_acp_child(_Quiet(), *args, cwd=tmp_path, env=env) as (conn, _):
        with anyio.fail_after(30):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            answer = await conn.prompt(
                session_id=session.session_id, prompt=[TextContentBlock(type="text", text="hi")]
            )
        assert answer.stop_reason == "end_turn"
    spans = collector.wait_for(lambda found: any(s.name.startswith("chat") for s in found))
    summary = [(s.service, s.scope, s.name, s.parent_id) for s in spans]
    turn = [s for s in spans if s.name == "invoke_agent"]
    assert len(turn) == 1, summary
    assert turn[0].service == "dsh-editor-agent"
    assert turn[0].attributes["gen_ai.agent.name"] == "dsh"
    # the editor sent no trace context: one trace, the turn its root, no acp.* roots
    assert [s.name for s in spans if not s.parent_id] == ["invoke_agent"], summary
    assert len({s.trace_id for s in spans}) == 1, summary
