"""The OpenTelemetry SDK's own cost of what one guarded call exports, without the Guard.

:func:`capture` runs one call through a Guard whose telemetry records into memory and keeps
what it exported: its spans (names, kinds, attributes, events, parents) and its metric
points (instrument, kind, attributes, value). :class:`Replay` then hands the very same
spans and points to a fresh SDK, configured as the bench configures the Guard's (a simple
span processor into a dropping exporter, an in-memory metric reader), with no llmguard code
in between: the floor a Guard exporting those signals cannot go under, what
``bench/overhead.py`` reports as ``otel_sdk_floor_us`` beside the Guard's
``telemetry_sdk`` stage.

Not a benchmark itself (the leading underscore).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Histogram,
    InMemoryMetricReader,
    Sum,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass(frozen=True)
class _Point:
    instrument: str  # "histogram", "counter" or "up_down_counter"
    name: str
    unit: str
    attributes: dict[str, Any]
    values: tuple[float, ...]  # what the call recorded (a histogram's count of its mean)


@dataclass(frozen=True)
class Exported:
    """What one call exported: its spans, parents first, and its metric points."""

    spans: tuple[ReadableSpan, ...]
    points: tuple[_Point, ...]

    def summary(self) -> dict[str, int]:
        """How many spans, span attributes, span events and metric points."""
        return {
            "spans": len(self.spans),
            "span_attributes": sum(len(span.attributes or {}) for span in self.spans),
            "span_events": sum(len(span.events) for span in self.spans),
            "metric_points": sum(len(point.values) for point in self.points),
        }


class _Dropping(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def recording_providers() -> tuple[TracerProvider, MeterProvider, InMemorySpanExporter, Any]:
    """A tracer provider keeping finished spans in memory and a meter provider with an
    in-memory reader (and both of those)."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    return tracer_provider, MeterProvider(metric_readers=[reader]), exporter, reader


def capture(
    call: Callable[[], object], exporter: InMemorySpanExporter, reader: InMemoryMetricReader
) -> Exported:
    """Run ``call`` (one guarded call through telemetry that exports into ``exporter`` and
    ``reader``, nothing exported before) and return what it exported."""
    call()
    spans = sorted(exporter.get_finished_spans(), key=lambda span: span.parent is not None)
    points: list[_Point] = []
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attributes = dict(point.attributes or {})
                    if isinstance(metric.data, Histogram):
                        mean = point.sum / point.count if point.count else 0.0
                        values = (mean,) * point.count
                        kind = "histogram"
                    elif isinstance(metric.data, Sum):
                        values = (point.value,)
                        kind = "counter" if metric.data.is_monotonic else "up_down_counter"
                    else:
                        continue  # (gauges: a Guard's calls record none)
                    points.append(_Point(kind, metric.name, metric.unit, attributes, values))
    return Exported(tuple(spans), tuple(points))


class Replay:
    """Hands ``exported`` to a fresh SDK on each call (see the module docs)."""

    def __init__(self, exported: Exported) -> None:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(_Dropping()))
        self._tracer = tracer_provider.get_tracer("replay")
        meter = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("replay")
        self._spans = exported.spans
        self._points: list[tuple[Callable[..., None], dict[str, Any], tuple[float, ...]]] = []
        for point in exported.points:
            if point.instrument == "histogram":
                record = meter.create_histogram(point.name, unit=point.unit).record
            elif point.instrument == "counter":
                record = meter.create_counter(point.name, unit=point.unit).add
            else:
                record = meter.create_up_down_counter(point.name, unit=point.unit).add
            self._points.append((record, point.attributes, point.values))

    def __call__(self) -> None:
        """Export the call's spans (a child in its parent's context) and metric points."""
        started = time.time_ns()
        contexts: dict[int, Any] = {}
        for span in self._spans:
            parent = span.parent
            context = contexts.get(parent.span_id) if parent is not None else None
            replayed = self._tracer.start_span(
                span.name,
                context=context,
                kind=span.kind,
                attributes=span.attributes,
                start_time=started,
            )
            for event in span.events:
                replayed.add_event(event.name, event.attributes, timestamp=started)
            if span.context is not None:
                contexts[span.context.span_id] = trace.set_span_in_context(replayed)
            replayed.end(end_time=started + 1000)
        for record, attributes, values in self._points:
            for value in values:
                record(value, attributes)
