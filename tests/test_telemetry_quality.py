"""Quality signals (refusals, truncated and empty answers, JSON-schema failures, guardrail
rejections) and application feedback, as metrics per feature, route and release and as span
events; real FakeProvider servers (and a raw loopback server for a refusal), the real
OpenTelemetry SDK with in-memory exporters."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace

from llmguard_sdk import Guard, GuardrailRejectedError, OpenAICompatibleProvider
from llmguard_sdk.errors import RequestValidationError
from llmguard_sdk.models import ChatResponse
from llmguard_sdk.telemetry import Telemetry
from llmguard_sdk.telemetry._labels import CappedMeter
from llmguard_sdk.telemetry._quality import Quality
from llmguard_sdk.testing import FakeProvider

from .rawserver import RawServer, http_response
from .test_telemetry import Exported, call_span, exporting

MakeGuard = Callable[..., Guard]
_otel = pytest.fixture(exporting, name="otel")
USER = [{"role": "user", "content": "hello there"}]
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {"type": "object", "required": ["city"], "properties": {"city": {}}},
    },
}


def signals(otel: Exported) -> dict[tuple[str, str | None, str | None], int]:
    return {
        (
            p.attributes["llmguard.quality.signal"],
            p.attributes.get("llmguard.feature"),
            p.attributes.get("llmguard.release"),
        ): p.value
        for p in otel.points("llmguard.quality.signals")
    }


def events(otel: Exported) -> list[str]:
    return [
        str((e.attributes or {})["llmguard.quality.signal"])
        for s in otel.finished()
        for e in s.events
        if e.name == "llmguard.quality"
    ]


def test_truncated_and_empty_answers(fake: FakeProvider, otel: Exported) -> None:
    replies = iter(["one two three four five six", "   "])
    with FakeProvider(name="primary", reply=lambda body: next(replies)) as api:
        provider = OpenAICompatibleProvider(api.base_url, model="fake-model", name="primary")
        with Guard(provider, telemetry=otel.telemetry, retry=None, environ={}) as guard:
            cut = guard.chat(USER, max_tokens=2, feature="faq", metadata={"release": "v2"})
            guard.chat(USER, feature="faq", metadata={"release": "v2"})
    assert cut.finish_reason == "length"
    assert signals(otel) == {("truncated", "faq", "v2"): 1, ("empty", "faq", "v2"): 1}
    assert events(otel) == ["truncated", "empty"]
    (point,) = [
        p
        for p in otel.points("llmguard.quality.signals")
        if p.attributes["llmguard.quality.signal"] == "truncated"
    ]
    assert point.attributes["llmguard.served_by"] == "primary"


def test_json_schema_failures_only_when_json_was_asked_and_not_given(otel: Exported) -> None:
    replies = iter(['{"city": "Paris"}', '{"town": "Paris"}', "Paris, I think", "[1]", "plain"])
    with FakeProvider(name="primary", reply=lambda body: next(replies)) as api:
        provider = OpenAICompatibleProvider(api.base_url, model="fake-model", name="primary")
        with Guard(provider, telemetry=otel.telemetry, retry=None, environ={}) as guard:
            for _ in range(3):
                guard.chat(USER, response_format=SCHEMA, feature="geo")
            guard.chat(USER, response_format={"type": "json_object"}, feature="geo")
            guard.chat(USER, feature="geo")  # no JSON asked: plain text is fine
    assert signals(otel) == {("json_schema", "geo", None): 3}  # missing key, not JSON, a list


def test_a_refusal_from_the_provider(otel: Exported) -> None:
    body = json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "I can't help with that."},
                    "finish_reason": "content_filter",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9},
        }
    )
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
    ).encode()
    with RawServer(head) as raw:
        provider = OpenAICompatibleProvider(raw.base_url, model="m", name="strict")
        with Guard(provider, telemetry=otel.telemetry, retry=None, environ={}) as guard:
            guard.chat(USER, feature="faq")
    assert signals(otel) == {("refusal", "faq", None): 1}
    assert events(otel) == ["refusal"]


_AUDIO = {"id": "audio_1", "data": "UklGRg==", "expires_at": 2**31, "transcript": "Hi there"}


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ({"role": "assistant", "content": None, "audio": _AUDIO}, {}),  # gpt-4o-audio's
        ({"role": "assistant", "content": None}, {("empty", "faq", None): 1}),
        ({"role": "assistant", "content": " ", "audio": {"id": ""}}, {("empty", "faq", None): 1}),
    ],
)
def test_an_audio_answer_without_text_is_not_empty(
    message: dict[str, Any], said: dict[tuple[str, str | None, str | None], int], otel: Exported
) -> None:
    """OpenAI's audio answers come with ``content: null``: the audio is the answer. They
    were counted ``empty``; a blank answer still is (one with an empty audio too)."""
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"id": "c-1", "object": "chat.completion", "model": "m", "choices": [choice]}
    with RawServer(http_response(json.dumps(body).encode())) as raw:
        provider = OpenAICompatibleProvider(raw.base_url, model="m", name="voice")
        with Guard(provider, telemetry=otel.telemetry, retry=None, environ={}) as guard:
            answer = guard.chat(USER, feature="faq")
    assert answer.text.strip() == ""
    assert signals(otel) == said
    assert events(otel) == [signal for signal, _, _ in said]


def test_an_output_filter_rejection(fake: FakeProvider, otel: Exported) -> None:
    def no_hello(response: ChatResponse) -> None:
        if "hello" in response.text.lower():
            raise GuardrailRejectedError("greeting")

    provider = OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary")
    with (
        Guard(provider, telemetry=otel.telemetry, output_filters=[no_hello], environ={}) as guard,
        pytest.raises(GuardrailRejectedError),
    ):
        guard.chat(USER, feature="faq")
    assert signals(otel) == {("output_filter", "faq", None): 1}
    assert call_span(otel).events[0].name == "llmguard.quality"


def test_feedback_is_counted_with_the_calls_labels_and_linked_to_its_span(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    answer = guard.chat(USER, feature="faq", metadata={"release": "v2"})
    call_id = answer.metadata["call_id"]
    span = call_span(otel)
    assert span.attributes is not None
    assert span.attributes["llmguard.call_id"] == call_id
    assert otel.telemetry.feedback(call_id, 1.0, label="thumbs")
    assert otel.telemetry.feedback(call_id, 0.0, label="thumbs")
    assert not otel.telemetry.feedback("no-such-call", 0.5)  # counted without labels
    points = {
        (p.attributes.get("llmguard.feature"), p.attributes.get("llmguard.feedback.label")): p
        for p in otel.points("llmguard.feedback.score")
    }
    mine = points[("faq", "thumbs")]
    assert (mine.count, mine.sum) == (2, 1.0)
    assert mine.attributes["llmguard.served_by"] == "primary"
    assert mine.attributes["llmguard.release"] == "v2"
    assert points[(None, None)].count == 1
    feedback = [s for s in otel.finished() if s.name == "llmguard.feedback"]
    assert len(feedback) == 3
    assert [link.context.span_id for link in feedback[0].links] == [span.context.span_id]
    scored = feedback[0].events[0].attributes
    assert scored is not None
    assert scored["llmguard.feedback.score"] == 1.0
    assert not feedback[2].links


@pytest.mark.parametrize("score", [float("nan"), float("inf"), "good", True, None])
def test_feedback_refuses_what_is_not_a_score(otel: Exported, score: Any) -> None:
    with pytest.raises(RequestValidationError, match="finite number"):
        otel.telemetry.feedback("x", score)
    with pytest.raises(RequestValidationError, match="label"):
        otel.telemetry.feedback("x", 1.0, label=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("call_id", [["x"], None, 5])
def test_feedback_refuses_a_call_id_that_is_no_string(otel: Exported, call_id: Any) -> None:
    """A list raised ``TypeError`` (unhashable); ``None`` or a number recorded a score under
    no call without a word."""
    with pytest.raises(RequestValidationError, match="call_id"):
        otel.telemetry.feedback(call_id, 1.0)
    assert otel.points("llmguard.feedback.score") == []


def test_cached_answers_carry_their_own_call_id(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry, cache=True)
    first = guard.chat(USER)
    second = guard.chat(USER)
    assert second.metadata["cache"] == "exact"
    assert first.metadata["call_id"] != second.metadata["call_id"]
    assert otel.telemetry.feedback(second.metadata["call_id"], 1.0)
    assert signals(otel) == {}


def test_guard_feedback_goes_to_its_telemetry(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    answer = guard.chat(USER, feature="faq")
    assert guard.feedback(answer.metadata["call_id"], 0.5, label="grader")
    (point,) = otel.points("llmguard.feedback.score")
    assert point.attributes["llmguard.feedback.label"] == "grader"
    assert point.attributes["llmguard.feature"] == "faq"
    with pytest.raises(RequestValidationError):
        guard.feedback(answer.metadata["call_id"], float("nan"))
    quiet = make_guard(fake, telemetry=False)
    assert not quiet.feedback("whatever", 1.0)


def test_feedback_links_the_calls_span_with_its_trace_state(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """What is remembered of a call is rebuilt into the same span context: ids, flags and
    the trace state the call inherited from its caller's trace."""
    guard = make_guard(fake, telemetry=otel.telemetry)
    caller = trace.SpanContext(
        0x1234, 0x5678, True, trace.TraceFlags(1), trace.TraceState([("vendor", "t61rcWkgMzE")])
    )
    token = otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(caller)))
    try:
        answer = guard.chat(USER, feature="faq", metadata={"release": "v7"})
    finally:
        otel_context.detach(token)
    span = call_span(otel)
    assert span.context.trace_state.get("vendor") == "t61rcWkgMzE"
    assert otel.telemetry.feedback(answer.metadata["call_id"], 1.0)
    (feedback,) = [s for s in otel.finished() if s.name == "llmguard.feedback"]
    assert [link.context for link in feedback.links] == [span.context]
    (point,) = otel.points("llmguard.feedback.score")
    assert dict(point.attributes or {}) == {
        "llmguard.feature": "faq",
        "llmguard.served_by": "primary",
        "llmguard.release": "v7",
    }


def _remembered(quality: Quality) -> list[object]:
    return list(quality._calls.values())


def test_remembered_calls_keep_no_object_the_collector_tracks(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """Each remembered call was a NamedTuple of the call's labels dict and its SpanContext
    (and its TraceFlags): up to 30,000 objects that every full collection walked. Now a plain
    tuple of strings and integers, which the collector stops tracking."""
    guard = make_guard(fake, telemetry=otel.telemetry)
    for feature in ("faq", "faq", None):
        guard.chat(USER, feature=feature, metadata={"release": "v2"})
    kept = _remembered(otel.telemetry._quality)
    assert len(kept) == 3
    for value in kept:
        assert type(value) is tuple
        assert not any(gc.is_tracked(part) for part in value)
    gc.collect()
    assert not any(gc.is_tracked(value) for value in kept)


def test_a_call_without_a_span_is_remembered_with_its_labels() -> None:
    """Without an OpenTelemetry SDK no span is made: feedback finds the call's labels (as
    strings, as they were recorded) and no span to link."""
    quality = Quality(CappedMeter(metrics.NoOpMeter("test"), 100), trace.NoOpTracer())
    quality.remember("c1", {"llmguard.feature": "faq", "llmguard.release": 2}, None)
    note = quality.feedback("c1", 0.5, None)
    assert note is not None
    assert note.labels == {"llmguard.feature": "faq", "llmguard.release": "2"}
    assert note.span is None
    assert quality.feedback("c2", 0.5, None) is None
    (value,) = _remembered(quality)
    gc.collect()
    assert not gc.is_tracked(value)


def test_a_call_without_an_sdk_is_remembered_for_feedback(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """With no SDK configured (the API's proxies) a call builds no span or labels dict, and
    feedback still knows it: its feature and release, no route, no span."""
    telemetry = Telemetry()
    assert not telemetry._exporting()
    guard = make_guard(fake, telemetry=telemetry)
    answer = guard.chat(USER, feature="faq", metadata={"release": "v7"})
    plain = guard.chat(USER)
    note = telemetry._quality.feedback(answer.metadata["call_id"], 1.0, None)
    assert note is not None
    assert note.labels == {"llmguard.feature": "faq", "llmguard.release": "v7"}
    assert note.span is None
    bare = telemetry._quality.feedback(plain.metadata["call_id"], 1.0, None)
    assert bare is not None
    assert bare.labels == {}
    assert bare.span is None
