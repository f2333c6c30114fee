"""The shape of a guarded call's spans as the GenAI conventions have it: one ``CLIENT``
inference span per call (the logical operation, its retries included) naming the server it
went to, with what a sampler needs at its start; attempt spans that no GenAI backend counts as
another operation; ``error.type`` as the error conventions name it; requests refused before
any attempt traced and measured as failed operations.

Real OpenTelemetry SDK with in-memory exporters, FakeProviders on loopback."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncGenerator, Generator, Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, StatusCode
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from llmguard_sdk import (
    AllRoutesFailedError,
    CallEvent,
    Guard,
    InputTooLargeError,
    OpenAICompatibleProvider,
    RequestValidationError,
    Scope,
)
from llmguard_sdk.errors import ProviderUnavailableError
from llmguard_sdk.models import ChatRequest, ChatResponse, StreamChunk
from llmguard_sdk.retry import waits_off
from llmguard_sdk.telemetry import Telemetry
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER, chat_in_mode
from .test_telemetry import Exported, MakeGuard, attempts_of, call_span, exporters

UNAVAILABLE = "llmguard_sdk.errors.ProviderUnavailableError"


@pytest.fixture(params=[True, False], ids=["propagated", "not-propagated"])
def otel(request: pytest.FixtureRequest) -> Iterator[Exported]:
    """Spans started as the attempts begin (trace context sent) or written as calls end."""
    exported, meter_provider = exporters(log_level=None, propagate=request.param)
    yield exported
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()


def port_of(server: FakeProvider) -> int:
    return int(server.base_url.split("://")[1].split("/")[0].rpartition(":")[2])


def genai_spans(otel: Exported) -> list[ReadableSpan]:
    """The spans a GenAI backend takes for inference operations."""
    return [
        s
        for s in otel.finished()
        if s.kind == SpanKind.CLIENT or any(k.startswith("gen_ai.") for k in s.attributes or {})
    ]


# -- server.address / server.port ------------------------------------------------------------


def test_spans_name_the_server_each_request_went_to(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, fake2, telemetry=otel.telemetry, retry=None)
    fake.script(Fault(status=503))
    guard.chat(USER)  # the primary fails, the backup serves
    span = call_span(otel)
    first, second = attempts_of(otel, span)
    assert first.attributes is not None
    assert second.attributes is not None
    assert (first.attributes["server.address"], first.attributes["server.port"]) == (
        "127.0.0.1",
        port_of(fake),
    )
    assert (second.attributes["server.address"], second.attributes["server.port"]) == (
        "127.0.0.1",
        port_of(fake2),
    )
    assert span.attributes is not None  # the operation's: the server that answered it
    assert span.attributes["server.address"] == "127.0.0.1"
    assert span.attributes["server.port"] == port_of(fake2)


def server_of(point: Any) -> tuple[object, object]:
    return point.attributes.get("server.address"), point.attributes.get("server.port")


@pytest.mark.parametrize("streaming", [False, True])
def test_duration_and_token_points_name_the_server_that_answered(
    fake: FakeProvider,
    fake2: FakeProvider,
    make_guard: MakeGuard,
    otel: Exported,
    streaming: bool,
) -> None:
    """The conventions recommend ``server.address`` and ``server.port`` on the duration and
    token usage metrics too: only the spans had them, so no latency could be split by the
    server (a region, a gateway) that answered."""
    guard = make_guard(fake, fake2, telemetry=otel.telemetry, retry=None)
    fake.script(Fault(status=503))
    if streaming:  # the primary fails, the backup serves
        with guard.chat(USER, stream=True) as chunks:
            list(chunks)
    else:
        guard.chat(USER)
    answered = ("127.0.0.1", port_of(fake2))
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert server_of(duration) == answered
    tokens = otel.points("gen_ai.client.token.usage")
    assert [server_of(p) for p in tokens] == [answered] * 2
    span = call_span(otel)
    assert span.attributes is not None  # the span's, as the span says it
    assert (span.attributes["server.address"], span.attributes["server.port"]) == answered


class OwnRoute:
    """A Provider of the application's own, that names no server (it speaks to ``fake``
    through an OpenAI-compatible route it keeps to itself), as the local fallback names
    none."""

    def __init__(self, fake: FakeProvider) -> None:
        self._inner = OpenAICompatibleProvider(fake.base_url, model=fake.model, name=fake.name)
        self.name = fake.name
        self.model: str | None = fake.model

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        return self._inner.complete(request, model=model, deadline=deadline)

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        return await self._inner.acomplete(request, model=model, deadline=deadline)

    def stream(
        self,
        request: ChatRequest,
        *,
        model: str,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> Generator[StreamChunk, None, None]:
        return self._inner.stream(
            request, model=model, deadline=deadline, idle_timeout=idle_timeout
        )

    def astream(
        self,
        request: ChatRequest,
        *,
        model: str,
        deadline: float,
        idle_timeout: float | None = None,
    ) -> AsyncGenerator[StreamChunk, None]:
        timing = {"deadline": deadline, "idle_timeout": idle_timeout}
        return self._inner.astream(request, model=model, **timing)  # type: ignore[arg-type]

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.mark.parametrize("backup_fails", [False, True])
def test_the_span_names_the_server_its_points_name_when_a_route_without_one_answers(
    fake: FakeProvider, fake2: FakeProvider, otel: Exported, backup_fails: bool
) -> None:
    """With trace propagation the call's span started naming the first route's server:
    a route without a server (your own Provider, the local fallback) that answered after
    the first route's 503 left the span naming the failed server, its points none. Both
    name the server that answered (none here); a call no route answered, the first's."""
    primary = OpenAICompatibleProvider(fake.base_url, model=fake.model, name=fake.name)
    guard = Guard([primary, OwnRoute(fake2)], telemetry=otel.telemetry, retry=None, environ={})
    fake.always(Fault(status=503))
    if backup_fails:
        fake2.always(Fault(status=503))
    with guard, contextlib.suppress(AllRoutesFailedError):
        guard.chat(USER)
    span = call_span(otel)
    assert span.attributes is not None
    (duration,) = otel.points("gen_ai.client.operation.duration")
    answered = (primary.server_address, primary.server_port) if backup_fails else (None, None)
    assert primary.server_address is not None
    assert server_of(duration) == answered
    assert (span.attributes.get("server.address"), span.attributes.get("server.port")) == answered
    assert span.attributes.get("llmguard.served_by") == (None if backup_fails else "backup")


@pytest.mark.parametrize(
    "metric",
    [
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.client.operation.time_per_output_chunk",
    ],
)
def test_chunk_timing_points_name_the_server_of_their_attempt(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, otel: Exported, metric: str
) -> None:
    """Each attempt's chunk-timing points carry its route's ``server.address`` and
    ``server.port``, as its attempt span does: they had none while the call's duration and
    token points named the server, so a slow first chunk could not be split by server."""
    guard = make_guard(
        fake, fake2, telemetry=otel.telemetry, retry=None, continue_interrupted_streams=True
    )
    fake.script(Fault(cut_stream_after=3))  # the primary streams, breaks; the backup goes on
    with guard.chat(USER, stream=True) as chunks:
        list(chunks)
    by_route = {p.attributes["llmguard.route"]: server_of(p) for p in otel.points(metric)}
    assert by_route == {
        "primary": ("127.0.0.1", port_of(fake)),
        "backup": ("127.0.0.1", port_of(fake2)),
    }
    span = call_span(otel)
    for attempt in attempts_of(otel, span):  # what each attempt span says
        assert attempt.attributes is not None
        route = attempt.attributes["llmguard.route"]
        assert by_route[route] == server_of(attempt)


def test_cache_hits_and_refused_calls_name_no_server_on_their_points(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry, cache=True)
    guard.chat(USER)
    guard.chat(USER)  # a hit: no request went out
    with pytest.raises(RequestValidationError):
        guard.chat(USER, temperature="hot")  # type: ignore[call-overload]
    by_kind = {
        (p.attributes.get("llmguard.cache"), p.attributes.get("error.type")): server_of(p)
        for p in otel.points("gen_ai.client.operation.duration")
    }
    assert by_kind == {
        (None, None): ("127.0.0.1", port_of(fake)),
        ("exact", None): (None, None),
        (None, "llmguard_sdk.errors.RequestValidationError"): (None, None),
    }


@pytest.mark.parametrize(
    ("base_url", "address", "port"),
    [
        ("http://localhost/v1", "localhost", 80),
        ("https://localhost/v1", "localhost", 443),
        ("http://127.0.0.1:8123/v1?api-version=1", "127.0.0.1", 8123),
        ("http://user:secret@[::1]:9000/v1", "::1", 9000),
    ],
)
def test_a_route_knows_its_server_from_its_base_url(base_url: str, address: str, port: int) -> None:
    route = OpenAICompatibleProvider(base_url, model="m")
    assert (route.server_address, route.server_port) == (address, port)


# -- one GenAI operation per call ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_retried_call_is_one_genai_operation(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, mode: str
) -> None:
    """The conventions: a GenAI span covers the logical operation with all its retries. The
    attempts were ``CLIENT`` ``chat {model}`` spans with the GenAI attributes too, which a
    GenAI backend counted as operations of their own: three for this one call."""
    guard = make_guard(fake, telemetry=otel.telemetry)
    fake.script(Fault(status=503))
    with waits_off():
        chat_in_mode(guard, mode)
    span = call_span(otel)
    assert genai_spans(otel) == [span]
    assert span.kind == SpanKind.CLIENT
    assert span.name == "chat fake-model"
    attempts = attempts_of(otel, span)
    assert len(attempts) == 2
    for number, attempt in enumerate(attempts, 1):
        assert attempt.kind == SpanKind.INTERNAL
        assert attempt.name == "llmguard.attempt"
        assert attempt.attributes is not None
        assert attempt.attributes["llmguard.route"] == "primary"
        assert attempt.attributes["llmguard.attempt"] == number


def test_a_streams_first_chunk_is_on_the_operations_span(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    fake.script(Fault(first_token_delay=0.05))
    with guard.chat(USER, stream=True) as chunks:
        list(chunks)
    span = call_span(otel)
    assert span.attributes is not None
    first_chunk = span.attributes["gen_ai.response.time_to_first_chunk"]
    assert isinstance(first_chunk, float)
    assert first_chunk >= 0.05
    (attempt,) = attempts_of(otel, span)
    assert attempt.attributes is not None
    assert attempt.attributes["llmguard.time_to_first_chunk_s"] == first_chunk
    assert genai_spans(otel) == [span]


# -- error.type ------------------------------------------------------------------------------


def test_error_type_is_the_qualified_class_name_as_exception_type_is(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, fake2, telemetry=otel.telemetry, retry=None, hooks=[events.append])
    fake.always(Fault(status=503))
    fake2.always(Fault(status=503))
    with pytest.raises(AllRoutesFailedError):
        guard.chat(USER)
    (event,) = events  # the hooks name each route's error as the spans do (the bare name was)
    assert event.route_errors == (("primary", UNAVAILABLE), ("backup", UNAVAILABLE))
    span = call_span(otel)
    assert span.attributes is not None
    assert span.attributes["error.type"] == "llmguard_sdk.errors.AllRoutesFailedError"
    (raised,) = [e for e in span.events if e.name == "exception"]
    assert raised.attributes is not None
    assert span.attributes["error.type"] == raised.attributes["exception.type"]
    failed_routes = [e.attributes for e in span.events if e.name == "llmguard.route_failed"]
    assert [dict(a or {}).get("error.type") for a in failed_routes] == [UNAVAILABLE] * 2
    for attempt in attempts_of(otel, span):
        assert attempt.attributes is not None
        assert attempt.attributes["error.type"] == UNAVAILABLE
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == "llmguard_sdk.errors.AllRoutesFailedError"


def test_a_protected_calls_route_errors_name_its_error_as_its_span_does(
    fake: FakeProvider, otel: Exported
) -> None:
    import openai

    events: list[CallEvent] = []
    guard = Guard(telemetry=otel.telemetry, environ={}, retry=None, hooks=[events.append])
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    @guard.protect(route="vendor-sdk")
    def ask() -> Any:
        return client.chat.completions.create(model="gpt-test", messages=[USER[0]])

    fake.script(Fault(status=503))
    with pytest.raises(openai.InternalServerError):
        ask()
    client.close()
    (event,) = events
    (span,) = otel.finished()
    assert span.attributes is not None
    assert event.route_errors == (("vendor-sdk", span.attributes["error.type"]),)
    assert event.route_errors == (("vendor-sdk", UNAVAILABLE),)


def test_a_protected_calls_error_type_is_qualified() -> None:
    exported, meter_provider = exporters(log_level=None)
    error = ProviderUnavailableError("down", route="sdk")
    event = CallEvent("protect", "error", Scope(), "gpt-test", "sdk", 1, 0.01, error=error)
    exported.telemetry.on_protect_event(event)
    (span,) = exported.finished()
    assert span.attributes is not None
    assert span.attributes["error.type"] == UNAVAILABLE
    (duration,) = exported.points("gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == UNAVAILABLE
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()


# -- refused requests ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_request_refused_by_validation_is_a_failed_operation(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, mode: str
) -> None:
    """A bad request left no span and no duration point: an error rate that leaves out every
    request the Guard refused."""
    guard = make_guard(fake, telemetry=otel.telemetry)
    with pytest.raises(RequestValidationError):
        chat_in_mode(guard, mode, temperature="hot")
    span = call_span(otel)
    assert span.kind == SpanKind.CLIENT
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == "llmguard_sdk.errors.RequestValidationError"
    assert span.attributes["llmguard.outcome"] == "error"
    assert span.attributes["llmguard.attempts"] == 0
    assert span.attributes["gen_ai.operation.name"] == "chat"
    assert span.attributes["gen_ai.request.model"] == "fake-model"
    (raised,) = [e for e in span.events if e.name == "exception"]
    assert raised.attributes is not None
    assert raised.attributes["exception.type"] == span.attributes["error.type"]
    assert attempts_of(otel, span) == []
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.count == 1
    assert duration.attributes["error.type"] == "llmguard_sdk.errors.RequestValidationError"
    assert duration.attributes["gen_ai.operation.name"] == "chat"
    assert fake.stats.requests == 0


def test_a_request_over_max_input_tokens_is_a_failed_operation(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry, max_input_tokens=5)
    question = [{"role": "user", "content": "far too many words for this guard " * 20}]
    with pytest.raises(InputTooLargeError), guard.chat(question, stream=True, feature="faq"):
        pass
    span = call_span(otel)
    assert span.attributes is not None
    assert span.attributes["error.type"] == "llmguard_sdk.errors.InputTooLargeError"
    assert span.attributes["llmguard.kind"] == "stream"
    assert span.attributes["llmguard.feature"] == "faq"
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == "llmguard_sdk.errors.InputTooLargeError"
    assert duration.attributes["llmguard.feature"] == "faq"
    assert fake.stats.requests == 0


def test_a_refused_request_under_the_callers_span_is_its_child(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    tracer = otel.tracer_provider.get_tracer("app")
    with (
        tracer.start_as_current_span("user-request") as outer,
        pytest.raises(RequestValidationError),
    ):
        guard.chat(USER, temperature="hot")  # type: ignore[call-overload]
    span = call_span(otel)
    assert span.parent is not None
    assert span.parent.span_id == outer.get_span_context().span_id


def test_an_input_guardrails_refusal_is_a_failed_operation_and_a_quality_signal(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    from llmguard_sdk import GuardrailRejectedError

    def refuse(request: Any) -> None:
        raise GuardrailRejectedError("no weapons")

    guard = make_guard(fake, telemetry=otel.telemetry, input_filters=[refuse])
    with pytest.raises(GuardrailRejectedError):
        guard.chat(USER, feature="faq")
    span = call_span(otel)
    assert span.attributes is not None
    assert span.attributes["error.type"] == "llmguard_sdk.errors.GuardrailRejectedError"
    assert span.attributes["llmguard.quality.signals"] == ("input_filter",)
    (signal,) = otel.points("llmguard.quality.signals")
    assert signal.attributes["llmguard.quality.signal"] == "input_filter"
    assert signal.attributes["llmguard.feature"] == "faq"


# -- what a sampler sees ---------------------------------------------------------------------


class Recording(Sampler):
    """Samples every span and keeps what it was shown at each span's start."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, SpanKind | None, dict[str, Any]]] = []

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        self.seen.append((name, kind, dict(attributes or {})))
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "Recording"


@pytest.mark.parametrize("propagate", [True, False])
def test_a_sampler_sees_the_operations_attributes_at_its_start(
    fake: FakeProvider, make_guard: MakeGuard, propagate: bool
) -> None:
    """The conventions list the attributes that "should be provided at span creation time
    (if provided at all)" for sampling: a sampler saw the operation and model alone. One
    route: its server is known as the span starts, propagated or not (routes of several
    servers: see the test of the span that names the server its points name)."""
    sampler = Recording()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    telemetry = Telemetry(tracer_provider=provider, log_level=None, propagate=propagate)
    make_guard(fake, telemetry=telemetry).chat(USER)
    (operation,) = [seen for seen in sampler.seen if seen[1] == SpanKind.CLIENT]
    name, _, attributes = operation
    assert name == "chat fake-model"
    server = {"server.address": "127.0.0.1", "server.port": port_of(fake)}
    assert {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "fake-model",
        **server,
    }.items() <= attributes.items()
    provider.shutdown()


# -- import cost -----------------------------------------------------------------------------


def test_import_and_a_guard_without_telemetry_load_no_opentelemetry() -> None:
    """``import llmguard_sdk`` imported OpenTelemetry's trace and metrics APIs, telemetry
    off or not; they now come with the first Telemetry (``telemetry=True``, the default)."""
    code = (
        "import json, sys; import llmguard_sdk; "
        "from llmguard_sdk import Guard, OpenAICompatibleProvider; "
        "Guard(OpenAICompatibleProvider('http://127.0.0.1:9/v1', model='m'), "
        "telemetry=False, environ={}).close(); "
        "before = sorted(m for m in sys.modules if m.startswith('opentelemetry')); "
        "Guard(OpenAICompatibleProvider('http://127.0.0.1:9/v1', model='m'), environ={}).close(); "
        "after = 'opentelemetry.trace' in sys.modules; "
        "print(json.dumps([before, after, llmguard_sdk.Telemetry.__name__]))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    before, after, name = json.loads(found.stdout)
    assert before == []
    assert after is True
    assert name == "Telemetry"
