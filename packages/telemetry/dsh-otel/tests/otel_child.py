"""``dsh`` with an OpenTelemetry SDK configured: ``python otel_child.py acp --preset P``.

Every span ends up as one JSON object per line in the file named by the environment
variable ``DSH_OTEL_SPANS_FILE`` (written as each span ends, so nothing is lost when
the process is stopped). The SDK stays a test dependency: this is the test's wrapper
around the real ``dsh`` command, run as a child process by the cross-process test.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

SPANS_FILE = "DSH_OTEL_SPANS_FILE"


class JsonLinesExporter(SpanExporter):
    """Appends each span to a file as one JSON line."""

    def __init__(self, path: str) -> None:
        self._path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self._path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(record(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def record(span: ReadableSpan) -> dict[str, Any]:
    """The parts of a span the test checks."""
    context = span.get_span_context()
    assert context is not None
    scope = span.instrumentation_scope
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "scope": scope.name if scope is not None else None,
        "kind": span.kind.name,
        "attributes": dict(span.attributes or {}),
    }


def main() -> int:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(os.environ[SPANS_FILE])))
    trace.set_tracer_provider(provider)
    from dsh.cli import main as dsh_main

    return dsh_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
