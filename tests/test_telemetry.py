"""Telemetry against the real OpenTelemetry SDK with in-memory exporters."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from llmguard_sdk import (
    AllRoutesFailedError,
    BudgetExceededError,
    ConfigurationError,
    Guard,
    OpenAICompatibleProvider,
    ProviderError,
)
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.retry import waits_off
from llmguard_sdk.telemetry import Telemetry
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .rawserver import RawServer

MakeGuard = Callable[..., Guard]
PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})


@dataclass
class Exported:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    telemetry: Telemetry
    tracer_provider: TracerProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def calls(self) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.parent is None or _is_user_span(s)]

    def by(self, name: str, label: str, field: str) -> dict[Any, Any]:
        return {p.attributes.get(label): getattr(p, field) for p in self.points(name)}

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found


def _is_user_span(span: ReadableSpan) -> bool:
    return span.name == "user-request"


def exporters(**options: Any) -> tuple[Exported, MeterProvider]:
    """A Telemetry (``options`` passed on) exporting to the real SDK's in-memory exporters;
    shut the meter provider and ``tracer_provider`` down afterwards."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    options.setdefault("log_level", logging.INFO)
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider, **options)
    return Exported(spans, reader, telemetry, tracer_provider), meter_provider


def exporting() -> Iterator[Exported]:
    """The ``otel`` fixture: :func:`exporters` with defaults, shut down afterwards."""
    exported, meter_provider = exporters()
    yield exported
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()


otel = pytest.fixture(exporting, name="otel")


def call_span(otel: Exported) -> ReadableSpan:
    (span,) = [s for s in otel.finished() if "llmguard.kind" in (s.attributes or {})]
    return span


def attempts_of(otel: Exported, call: ReadableSpan) -> list[ReadableSpan]:
    children = [
        s
        for s in otel.finished()
        if s.parent is not None and s.parent.span_id == call.context.span_id
    ]
    return sorted(children, key=lambda s: s.start_time or 0)


def test_a_plain_call(fake: FakeProvider, make_guard: MakeGuard, otel: Exported) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry, prices=PRICES)
    answer = guard.chat(USER, max_tokens=10, tenant="acme", feature="faq")
    span = call_span(otel)
    attributes = dict(span.attributes or {})
    assert span.name == "chat fake-model"
    assert span.kind == SpanKind.CLIENT
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "fake-model"
    assert attributes["gen_ai.response.model"] == answer.model
    assert attributes["gen_ai.request.max_tokens"] == 10
    assert answer.usage is not None
    assert attributes["gen_ai.usage.input_tokens"] == answer.usage.input_tokens
    assert attributes["gen_ai.usage.output_tokens"] == answer.usage.output_tokens
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes["llmguard.served_by"] == "primary"
    assert attributes["llmguard.feature"] == "faq"
    assert attributes["llmguard.tenant"] != "acme"  # hashed
    assert attributes["llmguard.attempts"] == 1
    assert attributes["llmguard.cost_usd"] == pytest.approx(answer.cost_usd)
    assert attributes["llmguard.cost_source"] == "estimated"
    assert "llmguard.cache" not in attributes  # no cache configured
    (attempt,) = attempts_of(otel, span)
    assert attempt.attributes is not None
    assert attempt.attributes["llmguard.route"] == "primary"
    assert span.start_time is not None
    assert attempt.start_time is not None
    assert span.end_time is not None
    assert attempt.end_time is not None
    assert span.start_time <= attempt.start_time <= attempt.end_time <= span.end_time
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.count == 1
    assert duration.attributes["gen_ai.request.model"] == "fake-model"
    tokens = {
        p.attributes["gen_ai.token.type"]: p.sum for p in otel.points("gen_ai.client.token.usage")
    }
    assert tokens == {"input": answer.usage.input_tokens, "output": answer.usage.output_tokens}
    (cost,) = otel.points("llmguard.cost")
    assert cost.value == pytest.approx(answer.cost_usd)


def test_the_requests_sampling_parameters_and_output_type_are_on_the_span(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """The conventions' recommended request attributes (``top_p``, ``stop_sequences``,
    ``seed``, the penalties and ``choice.count`` sent in ``extra_body``) and, when the request
    asks for a format, the conditionally required ``gen_ai.output.type``: only
    ``max_tokens`` and ``temperature`` were there."""
    guard = make_guard(fake, telemetry=otel.telemetry)
    guard.chat(
        USER,
        top_p=0.5,
        seed=7,
        stop="END",
        response_format={"type": "json_object"},
        extra_body={"frequency_penalty": 0.25, "presence_penalty": -0.5, "n": 1},
    )
    guard.chat(USER, stop=["A", "B"], response_format={"type": "text"})
    guard.chat(USER)
    asked, text, plain = [
        dict(s.attributes or {})
        for s in sorted(
            (s for s in otel.finished() if "llmguard.kind" in (s.attributes or {})),
            key=lambda s: s.start_time or 0,
        )
    ]
    assert asked["gen_ai.request.top_p"] == 0.5
    assert asked["gen_ai.request.seed"] == 7
    assert asked["gen_ai.request.stop_sequences"] == ("END",)
    assert asked["gen_ai.output.type"] == "json"
    assert asked["gen_ai.request.frequency_penalty"] == 0.25
    assert asked["gen_ai.request.presence_penalty"] == -0.5
    assert asked["gen_ai.request.choice.count"] == 1
    assert text["gen_ai.request.stop_sequences"] == ("A", "B")
    assert text["gen_ai.output.type"] == "text"
    assert not {key for key in plain if key.startswith(("gen_ai.request.", "gen_ai.output."))} - {
        "gen_ai.request.model",
        "gen_ai.request.stream",
    }


def test_a_retried_call(fake: FakeProvider, make_guard: MakeGuard, otel: Exported) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    fake.script(Fault(status=503))
    with waits_off():
        guard.chat(USER)
    span = call_span(otel)
    first, second = attempts_of(otel, span)
    assert first.attributes is not None
    assert second.attributes is not None
    assert first.attributes["error.type"] == "llmguard_sdk.errors.ProviderUnavailableError"
    assert first.status.status_code == StatusCode.ERROR
    assert "llmguard.retry_wait_s" in first.attributes
    assert "error.type" not in second.attributes
    assert span.attributes is not None
    assert span.attributes["llmguard.attempts"] == 2
    assert "llmguard.retry_wait_s" in span.attributes
    assert span.status.status_code == StatusCode.UNSET
    (retries,) = otel.points("llmguard.retries")
    assert retries.value == 1


def test_a_fallback(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, fake2, telemetry=otel.telemetry, retry=None)
    fake.always(Fault(status=503))
    guard.chat(USER)
    span = call_span(otel)
    assert span.attributes is not None
    assert span.attributes["llmguard.served_by"] == "backup"
    assert [e.name for e in span.events] == ["llmguard.route_failed"]
    assert span.events[0].attributes == {
        "llmguard.route": "primary",
        "error.type": "llmguard_sdk.errors.ProviderUnavailableError",
    }
    routes = [a.attributes["llmguard.route"] for a in attempts_of(otel, span) if a.attributes]
    assert routes == ["primary", "backup"]
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.attributes["llmguard.served_by"] == "backup"


def test_failures_are_recorded_as_exception_events(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """A failed call's span and each failed attempt's carry an ``exception`` event (the
    exception conventions' ``exception.type``, fully qualified, and ``exception.message``,
    redacted as the status is), which trace backends show as the span's error; there was
    only the status text."""
    guard = make_guard(fake, fake2, telemetry=otel.telemetry, retry=None)
    fake.always(Fault(status=503))
    fake2.always(Fault(status=500))
    with pytest.raises(AllRoutesFailedError):
        guard.chat(USER, tenant="tenant-acme-77")
    span = call_span(otel)
    (raised,) = [e for e in span.events if e.name == "exception"]
    assert raised.attributes is not None
    assert raised.attributes["exception.type"] == "llmguard_sdk.errors.AllRoutesFailedError"
    assert raised.attributes["exception.message"] == span.status.description
    assert "all routes failed" in str(raised.attributes["exception.message"])
    for attempt in attempts_of(otel, span):
        (failure,) = [e for e in attempt.events if e.name == "exception"]
        assert failure.attributes is not None
        assert failure.attributes["exception.type"] == (
            "llmguard_sdk.errors.ProviderUnavailableError"
        )
        assert "HTTP 5" in str(failure.attributes["exception.message"])
    fake.always(None)
    guard.chat(USER)
    served = [s for s in otel.finished() if "llmguard.kind" in (s.attributes or {})][-1]
    assert all(e.name != "exception" for e in served.events)


def test_a_cache_hit(fake: FakeProvider, make_guard: MakeGuard, otel: Exported) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry, cache=True)
    guard.chat(USER)
    guard.chat(USER)
    first, hit = sorted(
        (s for s in otel.finished() if "llmguard.kind" in (s.attributes or {})),
        key=lambda s: s.start_time or 0,
    )
    assert first.attributes is not None
    assert hit.attributes is not None
    assert first.attributes["llmguard.cache"] == "miss"
    assert hit.attributes["llmguard.cache"] == "exact"
    assert hit.attributes["llmguard.cache.similarity"] == 1.0
    assert hit.attributes["llmguard.served_by"] == "cache"
    assert attempts_of(otel, hit) == []  # no provider attempt
    durations = {
        p.attributes.get("llmguard.cache"): p.count
        for p in otel.points("gen_ai.client.operation.duration")
    }
    assert durations == {None: 1, "exact": 1}  # hits are labelled, not mixed in
    assert {
        p.attributes["gen_ai.token.type"]: p.count for p in otel.points("gen_ai.client.token.usage")
    } == {"input": 1, "output": 1}
    lookups = {
        p.attributes["llmguard.cache"]: p.value for p in otel.points("llmguard.cache.lookups")
    }
    assert lookups == {"miss": 1, "exact": 1}


def test_a_budget_refusal(fake: FakeProvider, make_guard: MakeGuard, otel: Exported) -> None:
    guard = make_guard(
        fake,
        telemetry=otel.telemetry,
        budgets=Budgets([Budget(limit_usd=0.000001)], prices=PRICES),
    )
    with pytest.raises(BudgetExceededError):
        guard.chat(USER, max_tokens=10)
    span = call_span(otel)
    assert span.attributes is not None
    assert span.attributes["error.type"] == "llmguard_sdk.errors.BudgetExceededError"
    assert span.attributes["llmguard.outcome"] == "error"
    assert span.status.status_code == StatusCode.ERROR
    assert attempts_of(otel, span) == []
    assert fake.stats.requests == 0
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == "llmguard_sdk.errors.BudgetExceededError"


def test_budget_events_are_counted_with_scopes_and_no_tenant_ids(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    seen: list[object] = []
    budgets = Budgets(
        [Budget(limit_usd=0.002, scope="tenant")], prices=PRICES, on_event=[seen.append]
    )
    guard = make_guard(fake, telemetry=otel.telemetry, budgets=budgets)
    with pytest.raises(BudgetExceededError):  # its worst case does not fit
        guard.chat(USER, max_tokens=10, tenant="acme")
    events = otel.by("llmguard.budget.events", "llmguard.budget.event", "value")
    assert events.get("exhausted") == 1  # the Guard wires its telemetry to the budgets
    assert len(seen) == 1  # beside the application's own hook
    (left,) = otel.points("llmguard.budget.remaining")
    assert 0 <= left.value <= 0.002
    assert left.attributes["llmguard.budget.scope"] == "tenant"  # the kind, no tenant id
    assert "acme" not in str(left.attributes)


def test_a_per_tenant_budget_keeps_one_remaining_series_not_one_per_tenant(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """Tenant ids (hashed or not) on a metric grow its state with every tenant ever refused:
    the SDK keeps each attribute set it saw."""
    budgets = Budgets(
        [Budget(limit_usd=0.000001, scope="tenant", name="per-tenant")], prices=PRICES
    )
    guard = make_guard(fake, telemetry=otel.telemetry, budgets=budgets)
    for number in range(20):
        with pytest.raises(BudgetExceededError):
            guard.chat(USER, max_tokens=10, tenant=f"tenant-{number}")
    left = otel.points("llmguard.budget.remaining")
    assert len(left) == 1  # 20 before: one series per tenant
    assert left[0].attributes == {
        "llmguard.budget": "per-tenant",
        "llmguard.budget.scope": "tenant",
    }


def test_a_stream_measures_first_token_and_gaps_honestly(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    first_delay, gap, words = 0.3, 0.05, 12
    guard = make_guard(fake, telemetry=otel.telemetry)
    fake.script(Fault(first_token_delay=first_delay, inter_token_delay=gap))
    question = [{"role": "user", "content": " ".join(["w"] * words)}]
    with guard.chat(question, stream=True, max_tokens=words) as stream:
        chunks = [c for c in stream if c.text]
    assert len(chunks) >= 8
    whole_stream = first_delay + len(chunks) * gap
    (ttft,) = otel.points("llmguard.time_to_first_token")
    (first_chunk,) = otel.points("gen_ai.client.operation.time_to_first_chunk")
    for point in (ttft, first_chunk):
        assert first_delay <= point.sum < first_delay + 0.25 < whole_stream
    gaps = otel.points("gen_ai.client.operation.time_per_output_chunk")
    (gap_point,) = gaps
    assert gap_point.count == len(chunks) - 1
    mean_gap = gap_point.sum / gap_point.count
    assert gap * 0.6 <= mean_gap <= gap + 0.05
    span = call_span(otel)
    assert span.attributes is not None
    assert span.attributes["llmguard.kind"] == "stream"
    ttft_s = span.attributes["llmguard.time_to_first_token_s"]
    assert isinstance(ttft_s, float)
    assert first_delay <= ttft_s < first_delay + 0.25
    first_chunk_s = span.attributes["gen_ai.response.time_to_first_chunk"]
    assert isinstance(first_chunk_s, float)
    assert first_delay <= first_chunk_s
    (attempt,) = attempts_of(otel, span)  # (the attempt that streamed: the same time)
    assert attempt.attributes is not None
    assert attempt.attributes["llmguard.time_to_first_chunk_s"] == first_chunk_s
    (speed,) = otel.points("llmguard.output_tokens_per_second")
    assert speed.sum > 0


def test_spans_nest_under_the_callers_span(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    guard = make_guard(fake, telemetry=otel.telemetry)
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("user-request") as outer:
        guard.chat(USER)
    span = call_span(otel)
    assert span.parent is not None
    assert span.parent.span_id == outer.get_span_context().span_id
    assert span.context.trace_id == outer.get_span_context().trace_id


def test_breaker_transitions_are_counted(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    from llmguard_sdk.breaker import BreakerPolicy

    policy = BreakerPolicy(window=4, minimum_calls=2, failure_rate=0.5, open_seconds=30)
    guard = make_guard(fake, telemetry=otel.telemetry, retry=None, breaker=policy)
    fake.always(Fault(status=503))
    for _ in range(2):
        with pytest.raises(ProviderError):
            guard.chat(USER)
    (opened,) = otel.points("llmguard.breaker.transitions")
    assert opened.attributes == {
        "llmguard.route": "primary",
        "llmguard.breaker.from": "closed",
        "llmguard.breaker.to": "open",
    }


def test_telemetry_off_and_bad_values(fake: FakeProvider, make_guard: MakeGuard) -> None:
    from llmguard_sdk.errors import ConfigurationError

    assert make_guard(fake, telemetry=False).chat(USER).text
    with pytest.raises(ConfigurationError):
        make_guard(fake, telemetry="yes")


# -- secrets and personal data ----------------------------------------------------------------

API_KEY = "sk-test-0123456789abcdefSECRET"
EMAIL = "jane.doe@example.com"
PHONE = "+1 415 555 0100"
CARD = "4111 1111 1111 1111"


def _everything_exported(otel: Exported, records: list[logging.LogRecord]) -> str:
    texts: list[str] = []
    for span in otel.finished():
        texts.append(span.name)
        texts.append(json.dumps(dict(span.attributes or {}), default=str))
        texts.append(str(span.status.description))
        for event in span.events:
            texts.append(event.name + json.dumps(dict(event.attributes or {}), default=str))
    data = otel.reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    texts.append(json.dumps(dict(point.attributes or {}), default=str))
    for record in records:
        texts.append(record.getMessage())
        texts.append(json.dumps(getattr(record, "llmguard", {}), default=str))
        if record.exc_info:
            texts.append(str(record.exc_info[1]))
    return "\n".join(texts)


def test_captured_input_follows_the_conventions_json_schema(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    """``gen_ai.input.messages`` MUST follow the input messages JSON schema (a list of
    ``{role, parts: [{type: text, content}]}``): it was the bare text, which tools that
    read the attribute as the conventions define it could not parse."""
    exported, meter_provider = exporters(capture_content=True, max_content_chars=8)
    guard = make_guard(fake, telemetry=exported.telemetry)
    guard.chat([{"role": "system", "content": "Be brief."}, *USER])
    span = call_span(exported)
    assert span.attributes is not None
    captured = json.loads(str(span.attributes["gen_ai.input.messages"]))
    assert captured == [
        {"role": "user", "parts": [{"type": "text", "content": str(USER[0]["content"])[:8]}]}
    ]
    meter_provider.shutdown()
    exported.tracer_provider.shutdown()


def test_no_secret_or_personal_data_leaves_through_any_path(
    fake: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    otel = Exported(
        spans,
        reader,
        Telemetry(
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[reader]),
            capture_content=True,
            log_level=logging.INFO,
        ),
        tracer_provider,
    )
    # A provider that echoes the key in its 401 body, as real ones do.
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {API_KEY}"}})
    head = (
        "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
    ).encode()
    leaky = RawServer(head)
    prompt = f"My e-mail is {EMAIL}, phone {PHONE}, card {CARD}. Key {API_KEY}."
    guard = Guard(
        [
            OpenAICompatibleProvider(leaky.base_url, api_key=API_KEY, model="m", name="leaky"),
            OpenAICompatibleProvider(fake.base_url, api_key=API_KEY, model="m", name="good"),
        ],
        telemetry=otel.telemetry,
        environ={},
    )
    caplog.set_level(logging.DEBUG, logger="llmguard_sdk")
    fake.script(Fault(status=503))  # a retry on the good route
    errors: list[BaseException] = []
    with waits_off():
        answer = guard.chat([{"role": "user", "content": prompt}], tenant="acme")
        with guard.chat([{"role": "user", "content": prompt}], stream=True) as stream:
            list(stream)
        try:
            Guard(
                OpenAICompatibleProvider(leaky.base_url, api_key=API_KEY, model="m"),
                telemetry=otel.telemetry,
                environ={},
            ).chat([{"role": "user", "content": prompt}])
        except ProviderError as exc:
            errors.append(exc)
    leaky.close()
    assert answer.route == "good"
    assert len(errors) == 1
    exported = _everything_exported(otel, caplog.records)
    exported += "\n" + str(errors[0]) + repr(errors[0].args) + str(errors[0].body)  # type: ignore[attr-defined]
    assert "[email]" in exported  # content was captured, masked
    for secret in (API_KEY, EMAIL, PHONE, CARD, "acme"):
        assert secret not in exported, secret
    assert "Incorrect API key provided: [secret]" in str(errors[0])


def test_content_is_not_captured_unless_asked(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="llmguard_sdk.calls")
    guard = make_guard(fake, telemetry=otel.telemetry)
    guard.chat([{"role": "user", "content": "a private question"}])
    exported = _everything_exported(otel, caplog.records)
    assert "private question" not in exported
    (record,) = [r for r in caplog.records if r.name == "llmguard_sdk.calls"]
    assert record.llmguard["llmguard.served_by"] == "primary"  # type: ignore[attr-defined]


def test_protected_vendor_calls_get_a_span_and_metrics(fake: FakeProvider, otel: Exported) -> None:
    import openai

    guard = Guard(telemetry=otel.telemetry, environ={})
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    @guard.protect(feature="faq")
    def ask(question: str) -> Any:
        return client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": question}]
        )

    completion = ask("what is up")
    client.close()
    (span,) = otel.finished()
    assert span.name == "chat gpt-test"
    assert span.attributes is not None
    assert span.attributes["llmguard.kind"] == "protect"
    assert span.attributes["llmguard.feature"] == "faq"
    assert span.attributes["gen_ai.usage.output_tokens"] == completion.usage.completion_tokens
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.attributes["gen_ai.request.model"] == "gpt-test"


def test_a_failed_protected_call_is_labelled_with_its_provider_as_a_served_one_is(
    fake: FakeProvider, otel: Exported
) -> None:
    """Successes and failures of one protected function share the provider label: an error
    rate by provider is the share of its failed calls, not 0 % and 100 % under two names.
    The provider is the conventions' ``gen_ai.provider.name`` of the SDK the function uses
    (``openai``), not the route's label, which is ``llmguard.route``."""
    import openai

    guard = Guard(telemetry=otel.telemetry, environ={}, retry=None)
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    @guard.protect(route="vendor-sdk")
    def ask() -> Any:
        return client.chat.completions.create(model="gpt-test", messages=[USER[0]])

    fake.script(Fault(), Fault(status=500))
    ask()
    with pytest.raises(openai.InternalServerError):
        ask()
    client.close()
    points = otel.points("gen_ai.client.operation.duration")
    assert sorted("error.type" in p.attributes for p in points) == [False, True]
    assert {p.attributes["gen_ai.provider.name"] for p in points} == {"openai"}
    assert {p.attributes["llmguard.route"] for p in points} == {"vendor-sdk"}
    spans = otel.finished()
    assert {s.attributes["gen_ai.provider.name"] for s in spans} == {"openai"}  # type: ignore[index]
    assert {s.attributes["llmguard.route"] for s in spans} == {"vendor-sdk"}  # type: ignore[index]
    raised = [e.attributes for s in spans for e in s.events if e.name == "exception"]
    assert [dict(a or {}).get("exception.type") for a in raised] == [  # as error.type has it
        "llmguard_sdk.errors.ProviderUnavailableError"
    ]


def test_ok_failed_and_closed_streams_of_one_protected_function_share_its_route_label(
    fake: FakeProvider, otel: Exported
) -> None:
    """A protected stream closed before its end was labelled ``llmguard.route="unknown"``
    while the same function's answered and failed calls said its ``route=``: its calls
    fell into two series, and its cancellations were no one's."""
    import openai

    guard = Guard(telemetry=otel.telemetry, environ={}, retry=None)
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)

    @guard.protect(route="vendor-sdk")
    def answer() -> Generator[str, None, None]:
        stream = client.chat.completions.create(model="gpt-test", messages=USER, stream=True)
        for chunk in stream:
            yield chunk.choices[0].delta.content or ""

    fake.script(Fault(), Fault(status=500))
    list(answer())  # ok
    with pytest.raises(openai.InternalServerError):
        list(answer())  # error
    pieces = answer()
    next(pieces)
    pieces.close()  # cancelled
    client.close()
    points = otel.points("gen_ai.client.operation.duration")
    assert sum(p.count for p in points) == 3
    assert {p.attributes["llmguard.route"] for p in points} == {"vendor-sdk"}
    spans = otel.finished()
    outcomes = sorted(str(dict(s.attributes or {})["llmguard.outcome"]) for s in spans)
    assert outcomes == ["cancelled", "error", "ok"]
    assert {s.attributes["llmguard.route"] for s in spans} == {"vendor-sdk"}  # type: ignore[index]


def test_protected_calls_are_counted_by_feature_as_guarded_calls_are(
    fake: FakeProvider, make_guard: MakeGuard, otel: Exported
) -> None:
    """The duration and token points of a guarded call carry its feature; a protected
    call's did not, so a feature's latency and tokens left its protected calls out."""
    guard = make_guard(fake, telemetry=otel.telemetry)
    guard.chat(USER, feature="faq")

    @guard.protect(feature="faq")
    def ask() -> dict[str, Any]:
        return {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}

    ask()
    for metric in ("gen_ai.client.operation.duration", "gen_ai.client.token.usage"):
        points = otel.points(metric)
        assert len(points) >= 2
        assert {p.attributes.get("llmguard.feature") for p in points} == {"faq"}, metric


def test_a_protected_anthropic_call_is_labelled_anthropic(
    fake: FakeProvider, otel: Exported
) -> None:
    """The client is found in what the function reaches (here: a module global it builds the
    client from), or in what it returns or raises."""
    import anthropic

    guard = Guard(telemetry=otel.telemetry, environ={}, retry=None)

    @guard.protect
    def ask() -> Any:
        with anthropic.Anthropic(api_key="sk-x", base_url=fake.url, max_retries=0) as sdk:
            return sdk.messages.create(
                model="claude-test", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
            )

    ask()
    (span,) = otel.finished()
    assert span.attributes is not None
    assert span.attributes["gen_ai.provider.name"] == "anthropic"
    assert span.attributes["llmguard.route"] == "protected"


def test_a_protected_call_of_an_unknown_sdk_is_labelled_unknown(otel: Exported) -> None:
    """Nothing tells the provider (a plain dict answer): ``unknown``, as a Guard's call
    with no route says, never the route's label."""
    guard = Guard(telemetry=otel.telemetry, environ={}, retry=None)

    @guard.protect(route="vendor-sdk")
    def ask() -> dict[str, Any]:
        return {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}

    ask()
    (span,) = otel.finished()
    assert span.attributes is not None
    assert span.attributes["gen_ai.provider.name"] == "unknown"


def test_the_provider_name_of_sdk_objects() -> None:
    """A client class says more than its package (Azure OpenAI is the openai package); an
    exception raised from the SDK's tells too; a plain answer tells nothing."""
    import anthropic
    import httpx2  # (what openai 3.x builds on: its errors take httpx2's requests)
    import openai

    from llmguard_sdk.telemetry._sdk_names import first_sdk_provider_name, sdk_provider_name

    azure = openai.AzureOpenAI(
        api_key="k", api_version="2024-10-21", azure_endpoint="https://x.openai.azure.com"
    )
    assert first_sdk_provider_name([openai, azure]) == "azure.ai.openai"
    azure.close()
    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = openai.APITimeoutError(request=httpx2.Request("POST", "http://h/"))
    assert sdk_provider_name(wrapped) == "openai"
    assert sdk_provider_name({"model": "m"}) is None
    anthropic_client = anthropic.Anthropic(api_key="k")
    assert first_sdk_provider_name([openai, openai.APIError, anthropic_client]) == "anthropic"
    anthropic_client.close()
    assert first_sdk_provider_name([None, {}]) is None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_both_legs_of_a_hedged_call_are_attempt_spans(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, otel: Exported, mode: str
) -> None:
    import anyio

    guard = make_guard(fake, fake2, telemetry=otel.telemetry, hedge_after=0.05, timeout=5)
    fake.script(Fault(latency=1.0))  # the primary is slow: the backup wins
    answer = guard.chat(USER) if mode == "sync" else anyio.run(lambda: guard.achat(USER))
    assert answer.route == "backup"
    span = call_span(otel)
    legs = {
        a.attributes["llmguard.route"]: a.attributes
        for a in attempts_of(otel, span)
        if a.attributes
    }
    assert set(legs) == {"primary", "backup"}
    assert legs["primary"].get("llmguard.cancelled") is True  # lost the race, no outcome
    assert "error.type" not in legs["backup"]
    assert "llmguard.cancelled" not in legs["backup"]
    assert span.attributes is not None
    assert span.attributes["llmguard.hedge_after_s"] == 0.05


def test_an_sdk_configured_after_the_guard_is_used_within_a_second() -> None:
    # Without an SDK the Guard builds no spans (a fast path); it looks for one again at most
    # every second, so an application that configures OpenTelemetry later is still traced.
    # The global providers can be set once per process: this runs in its own.
    script = """
import time
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider

with FakeProvider() as api:
    provider = OpenAICompatibleProvider(api.base_url, model="fake-model", name="fake")
    with Guard(provider, environ={}) as guard:
        guard.chat([{"role": "user", "content": "before"}])
        exporter = InMemorySpanExporter()
        sdk = TracerProvider()
        sdk.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(sdk)
        deadline = time.monotonic() + 5
        while not exporter.get_finished_spans() and time.monotonic() < deadline:
            guard.chat([{"role": "user", "content": "after"}])
            time.sleep(0.05)
        print(len(exporter.get_finished_spans()) > 0)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


@pytest.mark.parametrize(
    "options",
    [
        {"log_level": "INFO"},  # a level's name: every call's log record failed, a traceback each
        {"log_level": True},
        {"max_content_chars": -5},  # cut the last five characters off captured content
        {"max_content_chars": 2.5},
        {"anomalies": 5},  # every call's telemetry failed ("'int' has no attribute observe")
        {"eval_sink": "samples.jsonl"},  # a path, not an EvalSink
        {"redact": None},  # every call with captured content failed
        {"capture_content": "false"},  # truthy: prompts were captured
        {"capture_content": 1},
    ],
)
def test_options_that_would_fail_every_call_are_configuration_errors(
    options: dict[str, Any],
) -> None:
    with pytest.raises(ConfigurationError, match=next(iter(options))):
        Telemetry(**options)
    assert Telemetry(log_level=None, max_content_chars=0).capture_content is False
