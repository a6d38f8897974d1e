"""The recipes in docs/tracing.md run as written: each fenced block after a
``<!-- recipe: NAME -->`` marker is saved as NAME and the scripts are run in a fresh
interpreter (the console one as is, the Jaeger one against a local OTLP receiver)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)

DOC = Path(__file__).resolve().parents[4] / "docs" / "tracing.md"
RECIPE = re.compile(r"<!-- recipe: (\S+) -->\s*```[a-z]*\n(.*?)```", re.DOTALL)


@pytest.fixture
def recipes(tmp_path: Path) -> dict[str, Path]:
    if not DOC.exists():
        pytest.skip("docs/tracing.md is not here (not a checkout)")
    found = {name: body for name, body in RECIPE.findall(DOC.read_text(encoding="utf-8"))}
    assert set(found) == {"traced.toml", "trace_console.py", "trace_jaeger.py"}
    for name, body in found.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    return {name: tmp_path / name for name in found}


def run(script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, script.name],
        cwd=script.parent,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def json_objects(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects in ``text`` (the console exporter prints them one after another)."""
    decoder = json.JSONDecoder()
    index = text.find("{")
    while index != -1:
        value, end = decoder.raw_decode(text, index)
        if isinstance(value, dict):
            yield value
        index = text.find("{", end)


EXPECTED = sorted(
    [
        "invoke_agent",
        "chat",
        "chat",
        "execute_tool subagent",
        "invoke_agent summarise",
        "chat",
    ]
)


def test_the_console_recipe(recipes: dict[str, Path]) -> None:
    done = run(recipes["trace_console.py"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("completed - The child said: It is a README.")
    spans = [o for o in json_objects(done.stdout) if "context" in o]
    assert sorted(s["name"] for s in spans) == EXPECTED
    assert len({s["context"]["trace_id"] for s in spans}) == 1
    by_name = {s["name"]: s for s in spans}
    tool = by_name["execute_tool subagent"]
    assert by_name["invoke_agent summarise"]["parent_id"] == tool["context"]["span_id"]
    assert spans[0]["resource"]["attributes"]["service.name"] == "dsh"


class _Receiver(BaseHTTPRequestHandler):
    """A stand-in for an OTLP/HTTP trace receiver (Jaeger's port 4318)."""

    bodies: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.bodies.append((self.path, self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_the_jaeger_recipe(recipes: dict[str, Path]) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    _Receiver.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        done = run(recipes["trace_jaeger.py"], OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=endpoint)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert done.returncode == 0, done.stderr
    assert "completed - The child said: It is a README." in done.stdout
    names: list[str] = []
    services: set[str] = set()
    for path, body in _Receiver.bodies:
        assert path == "/v1/traces"
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    services.add(attribute.value.string_value)
            for scope_spans in resource_spans.scope_spans:
                names += [span.name for span in scope_spans.spans]
    assert sorted(names) == EXPECTED
    assert services == {"dsh"}
