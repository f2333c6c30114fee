"""Quality signals of guarded calls, and feedback from the application.

A call can be fast, error-free and wrong. Each finished call is checked for what its answer
tells without a grader:

* ``refusal``: the provider refused (``finish_reason`` ``content_filter``, or its word
  relayed raw: Claude's ``refusal``, Gemini's ``SAFETY``; or a refusal in the answer's
  metadata);
* ``truncated``: the answer is incomplete: it hit its token limit (``finish_reason``
  ``length``), Claude paused its turn (``pause_turn``) or a server cut it (Mistral's
  ``model_length``, vLLM's ``abort``: :data:`~llmguard_sdk.models.INCOMPLETE_FINISH_REASONS`);
* ``empty``: no text, no tool call and no audio (OpenAI's ``message.audio``: an audio answer
  has no text), and no refusal (a refusal without content is ``refusal`` alone);
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
remembered for feedback (a fixed-size map, oldest first out). Each is kept as one plain tuple
of strings and integers (:data:`_Kept`), which CPython's collector stops tracking after its
first pass over it: a dict, a ``NamedTuple`` or a ``SpanContext`` per call stays tracked, and
every full collection walks each tracked object (10,000 remembered calls were 10,000 to
30,000 more objects, about a tenth to a quarter of a full collection's walk in a server).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState

from ..errors import RequestValidationError

if TYPE_CHECKING:
    from ._labels import CappedMeter
    from .anomaly import AnomalyEvent

__all__ = ["CallNote", "Quality"]

_MAX_CALLS = 10_000
Attributes = dict[str, Any]
LABEL_KEYS = ("llmguard.feature", "llmguard.served_by", "llmguard.release")
"""The labels a call's feedback carries (what ``quality_labels`` gives), in this order."""
_Kept = tuple[
    str | None,  # feature, served_by, release (None: not a label of the call)
    str | None,
    str | None,
    int,  # the call span's trace id (0: no span), span id, trace flags, is_remote
    int,
    int,
    bool,
    str,  # its trace state, as a W3C tracestate header ("": none)
]
"""What is remembered of a call for feedback: no object the collector keeps tracking."""


class CallNote(NamedTuple):
    """What feedback knows about a finished call (rebuilt from what was kept, on lookup)."""

    labels: Attributes  # feature, served_by, release, as strings
    span: trace.SpanContext | None


def _kept(labels: Attributes, span: trace.SpanContext | None) -> _Kept:
    """``labels`` (of :data:`LABEL_KEYS`) and ``span`` as one untracked tuple."""
    feature, served_by, release = (
        str(labels[key]) if key in labels else None for key in LABEL_KEYS
    )
    if span is None:
        return (feature, served_by, release, 0, 0, 0, False, "")
    state = span.trace_state.to_header() if span.trace_state else ""
    flags = int(span.trace_flags)
    return (feature, served_by, release, span.trace_id, span.span_id, flags, span.is_remote, state)


def _note(kept: _Kept) -> CallNote:
    named = zip(LABEL_KEYS, kept[:3], strict=True)
    labels: Attributes = {key: value for key, value in named if value is not None}
    trace_id, span_id, flags, remote, state = kept[3:]
    if not trace_id:
        return CallNote(labels, None)
    entries = TraceState.from_header([state]) if state else None
    span = SpanContext(trace_id, span_id, remote, TraceFlags(flags), entries)
    return CallNote(labels, span)


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
        self._calls: OrderedDict[str, _Kept] = OrderedDict()
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
        """Keep what feedback on ``call_id`` will need (the oldest call goes past the cap):
        ``labels`` (those of :data:`LABEL_KEYS`) and ``span``, as a :data:`_Kept` tuple."""
        self._keep(call_id, _kept(labels, span))

    def remember_unexported(self, call_id: str, feature: str | None, release: object) -> None:
        """:meth:`remember` for a call whose span went nowhere (no SDK configured): its
        feature and release (what ``quality_labels`` gives it), no route, no span."""
        kept: _Kept = (
            None if feature is None else str(feature),
            None,
            str(release) if release else None,
            0,
            0,
            0,
            False,
            "",
        )
        self._keep(call_id, kept)

    def _keep(self, call_id: str, kept: _Kept) -> None:
        with self._lock:
            self._calls[call_id] = kept
            if len(self._calls) > _MAX_CALLS:
                self._calls.popitem(last=False)

    def feedback(self, call_id: str, score: float, label: str | None) -> CallNote | None:
        """Record a score for ``call_id``; the call's note, or None when it is not known
        (too old, from another process): the score is then counted without its labels."""
        score = _check(call_id, score, label)
        with self._lock:
            kept = self._calls.get(call_id)
        note = _note(kept) if kept is not None else None
        labels: Attributes = dict(note.labels) if note is not None else {}
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
