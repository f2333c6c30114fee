"""Quality signals of guarded calls, and feedback from the application.

A call can be fast, error-free and wrong. Each finished call is checked for what its answer
tells without a grader:

* ``refusal``: the provider refused (``finish_reason`` ``content_filter``, or a refusal in
  the answer's metadata);
* ``truncated``: the answer hit its token limit (``finish_reason`` ``length``);
* ``empty``: no text and no tool call;
* ``json_schema``: the request asked for JSON (``response_format`` ``json_object`` or
  ``json_schema``) and the answer is not JSON, or not of the schema's top-level type, or
  lacks one of its ``required`` keys;
* ``output_filter`` / ``input_filter``: a guardrail refused the call.

Each signal is a count on ``llmguard.quality.signals`` (``llmguard.quality.signal``,
``llmguard.feature``, ``llmguard.served_by``, ``llmguard.release``) and an
``llmguard.quality`` event on the call's span. ``Telemetry.feedback(call_id, score,
label=...)`` records what the application learnt later (a thumb, task success, a grader's
score) on ``llmguard.feedback.score`` with the call's feature, route and release, as an
``llmguard.feedback`` span linked to the call's span, and in the evaluation sample.

The ``call_id`` is ``response.metadata["call_id"]``; the last ``_MAX_CALLS`` calls are
remembered for feedback (a fixed-size map, oldest first out).
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind

from ..errors import GuardrailRejectedError, RequestValidationError

if TYPE_CHECKING:
    from ..models import ChatRequest, ChatResponse
    from ._labels import CappedMeter
    from .anomaly import AnomalyEvent

__all__ = ["CallNote", "Quality", "signals_of"]

_MAX_CALLS = 10_000
_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "number": (int, float),
    "integer": int,
    "boolean": bool,
}
Attributes = dict[str, Any]


class CallNote(NamedTuple):
    """What feedback needs to know about a finished call (a tuple: one per call is kept)."""

    labels: Attributes  # feature, served_by, release: the call's own dict, never changed
    span: trace.SpanContext | None


def signals_of(
    request: ChatRequest, response: ChatResponse | None, error: BaseException | None
) -> list[str]:
    """The quality signals of one finished call (see the module docs)."""
    if isinstance(error, GuardrailRejectedError):
        return ["output_filter" if error.stage == "output" else "input_filter"]
    if response is None or response.metadata.get("cache"):
        return []  # a cached answer was judged when it was first served
    found = []
    if response.finish_reason == "content_filter" or response.metadata.get("refusal"):
        found.append("refusal")
    if response.finish_reason == "length":
        found.append("truncated")
    if not response.text.strip() and not response.tool_calls:
        found.append("empty")
    elif request.response_format and not _fits(request.response_format, response.text):
        found.append("json_schema")
    return found


def _fits(response_format: dict[str, Any], text: str) -> bool:
    """Whether ``text`` is the JSON ``response_format`` asks for (top-level type and
    required keys of a ``json_schema``; anything for ``json_object``)."""
    kind = response_format.get("type")
    if kind not in ("json_object", "json_schema"):
        return True
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if kind == "json_object":
        return isinstance(value, dict)
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        return True
    expected = _JSON_TYPES.get(str(schema.get("type")))
    if expected is not None and not _is_a(value, expected):
        return False
    required = schema.get("required")
    if isinstance(value, dict) and isinstance(required, list):
        return all(key in value for key in required)
    return True


def _is_a(value: Any, expected: type | tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # JSON true is no number
        return expected is bool
    return isinstance(value, expected)


def _check(call_id: object, score: object, label: object) -> float:
    if not isinstance(call_id, str):
        raise RequestValidationError(f"feedback call_id must be a string, not {call_id!r}")
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise RequestValidationError(f"feedback score must be a finite number, not {score!r}")
    if label is not None and not isinstance(label, str):
        raise RequestValidationError(f"feedback label must be a string, not {label!r}")
    return float(score)


class Quality:
    """The quality instruments of one :class:`~llmguard_sdk.telemetry.Telemetry`."""

    def __init__(self, meter: CappedMeter, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._signals = meter.create_counter(
            "llmguard.quality.signals",
            description="Refusals, truncated and empty answers, JSON-schema failures and "
            "guardrail rejections",
        )
        self._scores = meter.create_histogram(
            "llmguard.feedback.score",
            description="Scores the application gave answers (guard.feedback)",
            explicit_bucket_boundaries_advisory=[-1.0, -0.5, 0.0, 0.25, 0.5, 0.75, 1.0],
        )
        self._anomalies = meter.create_counter(
            "llmguard.anomalies",
            description="Tokens per request, cost per hour or error rate over its baseline",
        )
        self.release_events = meter.create_counter(
            "llmguard.release.events", description="Release events: retiring models, canaries"
        )  # a release's health, beside its answers' quality
        self._calls: OrderedDict[str, CallNote] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, signals: list[str], labels: Attributes) -> None:
        """Count ``signals`` under ``labels``."""
        for signal in signals:
            self._signals.add(1, {**labels, "llmguard.quality.signal": signal})

    def anomalies(self, found: list[AnomalyEvent]) -> None:
        """Count ``found`` on ``llmguard.anomalies``."""
        for event in found:
            self._anomalies.add(
                1, {"llmguard.anomaly": event.kind, "llmguard.feature": event.feature}
            )

    def remember(self, call_id: str, labels: Attributes, span: trace.SpanContext | None) -> None:
        """Keep what feedback on ``call_id`` will need (the oldest call goes past the cap)."""
        note = CallNote(labels, span)
        with self._lock:
            self._calls[call_id] = note
            if len(self._calls) > _MAX_CALLS:
                self._calls.popitem(last=False)

    def feedback(self, call_id: str, score: float, label: str | None) -> CallNote | None:
        """Record a score for ``call_id``; the call's note, or None when it is not known
        (too old, from another process): the score is then counted without its labels."""
        score = _check(call_id, score, label)
        with self._lock:
            note = self._calls.get(call_id)
        labels: Attributes = {k: str(v) for k, v in note.labels.items()} if note else {}
        if label is not None:
            labels["llmguard.feedback.label"] = label
        self._scores.record(score, labels)
        links = [Link(note.span)] if note is not None and note.span is not None else []
        span = self._tracer.start_span(
            "llmguard.feedback", kind=SpanKind.INTERNAL, links=links, attributes=labels
        )
        event: Attributes = {"llmguard.call_id": call_id, "llmguard.feedback.score": score}
        if label is not None:
            event["llmguard.feedback.label"] = label
        span.add_event("llmguard.feedback", event)
        span.end()
        return note
