"""Fixtures: one OpenTelemetry SDK for the test process, its spans kept in memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dsh.otel import INSTRUMENTATION_NAME

_EXPORTER = InMemorySpanExporter()
_installed = False


class Spans:
    """The spans dsh.otel ended since the test began."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def all(self) -> list[ReadableSpan]:
        return [
            span
            for span in self.exporter.get_finished_spans()
            if span.instrumentation_scope is not None
            and span.instrumentation_scope.name == INSTRUMENTATION_NAME
        ]

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.all() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [span.name for span in self.all()]
        return found[0]

    @staticmethod
    def id(span: ReadableSpan) -> int:
        context = span.get_span_context()
        assert context is not None
        return context.span_id

    @staticmethod
    def trace(span: ReadableSpan) -> int:
        context = span.get_span_context()
        assert context is not None
        return context.trace_id

    @staticmethod
    def parent(span: ReadableSpan) -> int | None:
        return span.parent.span_id if span.parent is not None else None


@pytest.fixture
def spans() -> Iterator[Spans]:
    """The global tracer provider (set once per process) with an in-memory exporter."""
    global _installed
    if not _installed:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
        _installed = True
    _EXPORTER.clear()
    yield Spans(_EXPORTER)
    _EXPORTER.clear()
