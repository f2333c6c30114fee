"""Each attempt's HTTP request carries its attempt span's W3C trace context (``traceparent``,
and what the global propagator adds), so a server that traces requests (vLLM reads
``traceparent``) joins its spans to the Guard's; with no SDK configured, ``telemetry=False``
or ``Telemetry(propagate=False)`` nothing is sent.

Real OpenTelemetry SDK with in-memory exporters, FakeProviders on loopback whose recorded
requests show the headers that reached them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import anyio
import openai
import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from llmguard_sdk import ConfigurationError
from llmguard_sdk.retry import waits_off
from llmguard_sdk.telemetry import Telemetry
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.transport import http_client

from .conftest import USER, chat_in_mode
from .test_telemetry import Exported, MakeGuard, attempts_of, call_span, exporters

TRACE_HEADERS = ("traceparent", "tracestate", "baggage")


@pytest.fixture
def otel() -> Iterator[Exported]:
    exported, meter_provider = exporters(log_level=None)
    yield exported
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()


def traceparent(span: ReadableSpan) -> str:
    """The ``traceparent`` header of a request made inside ``span``."""
    context = span.context
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def sent(server: FakeProvider) -> list[str | None]:
    """The ``traceparent`` of each chat request ``server`` received, oldest first."""
    return [
        r.headers.get("traceparent")
        for r in server.requests
        if r.path.endswith("/chat/completions")
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_call_sends_its_attempt_spans_trace_context(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, mode: str
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    chat_in_mode(guard, mode)
    span = call_span(otel)
    (attempt,) = attempts_of(otel, span)
    assert sent(fake) == [traceparent(attempt)]
    assert attempt.parent is not None
    assert attempt.parent.span_id == span.context.span_id
    # the tree is as it was: names, attributes, the call span a root
    assert span.parent is None
    assert span.name == "chat fake-model"
    assert attempt.name == "llmguard.attempt"
    assert attempt.attributes is not None
    assert attempt.attributes["llmguard.route"] == "primary"
    assert attempt.attributes["llmguard.attempt"] == 1
    assert len(otel.finished()) == 2


def test_the_trace_continues_the_callers(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    with otel.tracer_provider.get_tracer("app").start_as_current_span("user-request") as outer:
        guard.chat(USER)
    (attempt,) = attempts_of(otel, call_span(otel))
    (header,) = sent(fake)
    assert header == traceparent(attempt)
    assert header is not None
    assert header.split("-")[1] == f"{outer.get_span_context().trace_id:032x}"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_sends_its_attempt_spans_trace_context(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, mode: str
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    if mode == "sync":
        with guard.chat(USER, stream=True) as chunks:
            list(chunks)
    else:

        async def read() -> None:
            try:
                async with await guard.achat(USER, stream=True) as chunks:
                    async for _chunk in chunks:
                        pass
            finally:
                await guard.aclose()

        anyio.run(read)
    span = call_span(otel)
    assert span.attributes is not None
    assert span.attributes["gen_ai.request.stream"] is True
    (attempt,) = attempts_of(otel, span)
    assert sent(fake) == [traceparent(attempt)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_each_retry_sends_its_own_attempt_span(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, mode: str
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    fake.script(Fault(status=503))
    with waits_off():
        chat_in_mode(guard, mode)
    first, second = attempts_of(otel, call_span(otel))
    assert sent(fake) == [traceparent(first), traceparent(second)]
    assert first.context.span_id != second.context.span_id
    assert first.attributes is not None
    assert first.attributes["error.type"] == "llmguard_sdk.errors.ProviderUnavailableError"
    # the idempotency key is the call's: the same on both attempts, next to the trace
    keys = {r.headers.get("idempotency-key") for r in fake.requests}
    assert len(keys) == 1
    assert None not in keys


def test_a_fallback_sends_each_routes_attempt_span(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, fake2, telemetry=otel.telemetry, retry=None)
    fake.always(Fault(status=503))
    assert guard.chat(USER).route == "backup"
    primary, backup = attempts_of(otel, call_span(otel))
    assert sent(fake) == [traceparent(primary)]
    assert sent(fake2) == [traceparent(backup)]


def test_both_legs_of_a_hedged_call_send_their_own_spans(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, fake2, telemetry=otel.telemetry, hedge_after=0.05, timeout=5)
    fake.script(Fault(latency=0.5))  # the primary is slow: the backup wins
    assert guard.chat(USER).route == "backup"
    legs = {
        a.attributes["llmguard.route"]: a
        for a in attempts_of(otel, call_span(otel))
        if a.attributes
    }
    assert sent(fake) == [traceparent(legs["primary"])]
    assert sent(fake2) == [traceparent(legs["backup"])]


def test_without_an_sdk_or_with_telemetry_off_nothing_is_sent(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # (no test in this process configures the global tracer provider: the API's no-op)
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider", (
        "a test set the global tracer provider in this process: run it in a subprocess"
    )
    make_guard(fake).chat(USER)  # telemetry=True, the default
    make_guard(fake, telemetry=False).chat(USER)
    make_guard(fake, telemetry=Telemetry(log_level=None)).chat(USER)
    assert len(fake.requests) == 3
    for request in fake.requests:
        assert not set(TRACE_HEADERS) & set(request.headers)


def test_propagate_false_sends_nothing_but_keeps_the_spans(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    exported, meter_provider = exporters(log_level=None, propagate=False)
    try:
        make_guard(fake, telemetry=exported.telemetry).chat(USER)
        assert sent(fake) == [None]
        assert len(attempts_of(exported, call_span(exported))) == 1
    finally:
        meter_provider.shutdown()
        exported.tracer_provider.shutdown()


def test_propagate_to_named_routes_only(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard
) -> None:
    exported, meter_provider = exporters(log_level=None, propagate={"backup"})
    try:
        guard = make_guard(fake, fake2, telemetry=exported.telemetry, retry=None)
        fake.always(Fault(status=503))
        guard.chat(USER)
        _primary, backup = attempts_of(exported, call_span(exported))
        assert sent(fake) == [None]
        assert sent(fake2) == [traceparent(backup)]
    finally:
        meter_provider.shutdown()
        exported.tracer_provider.shutdown()


def test_the_global_propagator_adds_its_headers(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """A composite propagator configured by the application (here trace context and
    baggage) injects all its headers: the caller's baggage reaches the server too."""
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(
        CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    )
    token = otel_context.attach(baggage.set_baggage("app.tenant", "acme"))
    try:
        make_guard(fake, telemetry=otel.telemetry).chat(USER)
    finally:
        otel_context.detach(token)
        propagate.set_global_textmap(before)
    (request,) = fake.requests
    (attempt,) = attempts_of(otel, call_span(otel))
    assert request.headers["traceparent"] == traceparent(attempt)
    assert request.headers["baggage"] == "app.tenant=acme"


UPSTREAM = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_the_attempts_context_replaces_one_the_request_carried(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """A trace context that came with the request (copied from an incoming request, sent by
    an instrumented SDK client through the transport seam) names a span before the
    attempt's: the attempt's replaces it, in whatever spelling; other headers stay."""
    guard = make_guard(fake, telemetry=otel.telemetry)
    guard.chat(USER, extra_headers={"TraceParent": UPSTREAM, "x-app": "1"})
    (request,) = fake.requests
    (attempt,) = attempts_of(otel, call_span(otel))
    assert request.headers["traceparent"] == traceparent(attempt)  # one header, the attempt's
    assert request.headers["x-app"] == "1"


def test_through_the_transport_seam(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """The openai SDK over the Guard's seam, its request carrying a trace context (as
    httpx instrumentation adds one): the server gets the attempt's."""
    guard = make_guard(fake, telemetry=otel.telemetry)
    client = openai.OpenAI(
        api_key="sk-not-sent", base_url="http://guard.test/v1", http_client=http_client(guard)
    )
    client.chat.completions.create(
        model="fake-model", messages=USER, extra_headers={"traceparent": UPSTREAM}
    )
    client.close()
    (attempt,) = attempts_of(otel, call_span(otel))
    assert sent(fake) == [traceparent(attempt)]


def test_a_carried_context_is_sent_as_it_is_when_nothing_is_propagated(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    make_guard(fake).chat(USER, extra_headers={"traceparent": UPSTREAM})  # no SDK
    assert sent(fake) == [UPSTREAM]


def test_an_unsampled_call_sends_its_trace_unsampled(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """A call the sampler drops exports nothing and tells the server so (the sampled bit of
    the trace flags off)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    provider = TracerProvider(sampler=ALWAYS_OFF)
    make_guard(fake, telemetry=Telemetry(tracer_provider=provider, log_level=None)).chat(USER)
    (header,) = sent(fake)
    assert header is not None
    assert int(header.split("-")[3], 16) & 1 == 0
    provider.shutdown()


@pytest.mark.parametrize("value", ["backup", 1, None, {"a", 2}])
def test_propagate_must_be_a_bool_or_route_names(value: object) -> None:
    with pytest.raises(ConfigurationError, match="propagate"):
        Telemetry(propagate=value)  # type: ignore[arg-type]


def test_no_warning_is_logged(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        make_guard(fake, telemetry=otel.telemetry).chat(USER)
    assert not caplog.records


VARYING = {  # differ from call to call whatever is propagated
    "llmguard.call_id",
    "llmguard.retry_wait_s",
    "gen_ai.response.id",
    "llmguard.time_to_first_token_s",
    "gen_ai.response.time_to_first_chunk",
    "llmguard.time_to_first_chunk_s",
}


Shape = tuple[str, str | None, dict[str, Any], list[str], str, set[str]]


def tree(exported: Exported) -> list[Shape]:
    """The exported spans as (name, parent's name, attributes that do not vary, event
    names, status, the names of every attribute), in start order."""
    spans = sorted(exported.finished(), key=lambda s: s.start_time or 0)
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    shape: list[Shape] = []
    for span in spans:
        attributes = dict(span.attributes or {})
        parent = by_id.get(span.parent.span_id) if span.parent is not None else None
        shape.append(
            (
                span.name,
                parent.name if parent is not None else None,
                {k: v for k, v in attributes.items() if k not in VARYING},
                [e.name for e in span.events],
                span.status.status_code.name,
                set(attributes),
            )
        )
    return shape


@pytest.mark.parametrize("stream", [False, True])
def test_the_exported_tree_is_the_same_with_or_without_propagation(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, stream: bool
) -> None:
    """Spans started as their attempts begin (to be propagated) export what spans written
    as the call ends do: names, parents, attributes, events, status."""
    trees = []
    for propagating in (True, False):
        exported, meter_provider = exporters(log_level=None, propagate=propagating)
        guard = make_guard(fake, fake2, telemetry=exported.telemetry)
        fake.always(Fault(status=503))  # two failed attempts, then the backup serves
        fake2.script(Fault(status=500))  # after one failure of its own
        with waits_off():
            if stream:
                with guard.chat(USER, stream=True, feature="faq") as chunks:
                    list(chunks)
            else:
                guard.chat(USER, feature="faq")
        trees.append(tree(exported))
        meter_provider.shutdown()
        exported.tracer_provider.shutdown()
    propagated, written_at_the_end = trees
    assert len(propagated) == 1 + 3 + 2  # the call, primary's 3 attempts, backup's 2
    assert propagated == written_at_the_end


def test_a_carried_tracestate_goes_with_the_traceparent_it_belonged_to(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """W3C: a ``tracestate`` belongs to its ``traceparent``. Where the attempt's trace
    context replaces the one the request carried and the attempt's span has no trace state
    (the propagator writes no ``tracestate``), the carried one (any spelling) is not sent
    next to the attempt's ``traceparent``, as if it were that trace's; other headers stay."""
    guard = make_guard(fake, telemetry=otel.telemetry)
    guard.chat(
        USER,
        extra_headers={"TraceParent": UPSTREAM, "TraceState": "vendor=old", "x-app": "1"},
    )
    (request,) = fake.requests
    (attempt,) = attempts_of(otel, call_span(otel))
    assert request.headers["traceparent"] == traceparent(attempt)
    assert "tracestate" not in request.headers
    assert request.headers["x-app"] == "1"


def test_a_carried_tracestate_is_dropped_through_the_transport_seam(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """The reviewer's case: an SDK client over the Guard's seam sends both headers."""
    guard = make_guard(fake, telemetry=otel.telemetry)
    client = openai.OpenAI(
        api_key="sk-not-sent", base_url="http://guard.test/v1", http_client=http_client(guard)
    )
    client.chat.completions.create(
        model="fake-model",
        messages=USER,
        extra_headers={"traceparent": UPSTREAM, "tracestate": "vendor=old"},
    )
    client.close()
    (request,) = fake.requests
    (attempt,) = attempts_of(otel, call_span(otel))
    assert request.headers["traceparent"] == traceparent(attempt)
    assert "tracestate" not in request.headers


def test_the_attempts_own_tracestate_replaces_a_carried_one(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """A caller's context with a trace state: the attempt's span inherits it and the
    propagator writes it, in place of the carried one (one header, the attempt's)."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    parent = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("app", "mine")]),
    )
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(parent)))
    try:
        make_guard(fake, telemetry=otel.telemetry).chat(
            USER, extra_headers={"traceparent": UPSTREAM, "TRACESTATE": "vendor=old"}
        )
    finally:
        otel_context.detach(token)
    (request,) = fake.requests
    (attempt,) = attempts_of(otel, call_span(otel))
    assert request.headers["traceparent"] == traceparent(attempt)
    assert request.headers["tracestate"] == "app=mine"  # (repeats would be joined)


def test_a_carried_tracestate_is_sent_as_it_is_when_nothing_is_propagated(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    make_guard(fake).chat(  # no SDK: the carried context is the request's own, whole
        USER, extra_headers={"traceparent": UPSTREAM, "tracestate": "vendor=old"}
    )
    (request,) = fake.requests
    assert request.headers["traceparent"] == UPSTREAM
    assert request.headers["tracestate"] == "vendor=old"
