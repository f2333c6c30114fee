"""The :class:`Telemetry` class: spans, metrics and the per-call log record."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Literal

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind

from .._ids import UniqueIds
from .._version import __version__
from ..errors import RequestValidationError
from ._attributes import (
    Attributes,
    add_first_chunk,
    add_request,
    add_response,
    add_scope,
    add_unserved,
    call_route,
    captured,
    check_options,
    exception_type,
    input_messages,
    operation,
    quality_labels,
    requested_model,
    route_of,
    scope_label,
    wall_ns,
)
from ._instruments import Instruments
from ._labels import CappedMeter
from ._options import Propagation, check_parts, checked_number, checked_propagate
from ._quality import Quality
from ._sdk_names import UNKNOWN
from ._semconv import Names, SemconvMode, names_for
from ._signals import signals_of
from ._spans import end_started, failed, start_traced_attempt, with_trace, write_attempts
from .anomaly import Anomalies, AnomalyEvent
from .redaction import redact
from .sampling import EvalSink, call_record

if TYPE_CHECKING:
    from ..breaker import BreakerTransition
    from ..budget import BudgetEvent
    from ..context import AttemptRecord, CallContext, CallEvent, Scope
    from ..models import ChatRequest, ChatResponse
    from ..providers.base import Provider
    from ..releases.release import ReleaseEvent

__all__ = ["Telemetry"]

_SCOPE = "llmguard_sdk"
_CALL_LOG = logging.getLogger("llmguard_sdk.calls")
_SDK_CHECK_SECONDS = 1.0
_call_ids = UniqueIds(random_digits=8)  # metadata["call_id"]
_PROXIES = frozenset(
    {"ProxyTracerProvider", "NoOpTracerProvider", "_ProxyMeterProvider", "NoOpMeterProvider"}
)


class Telemetry:
    """Traces, metrics and logs of guarded calls (see the module docs).

    Args:
        tracer_provider / meter_provider: default: the global ones (no-ops until the
            application configures the OpenTelemetry SDK).
        capture_content: add the last user message to spans (``gen_ai.input.messages``, in
            the conventions' JSON schema) and it and the answer to the log record
            (``prompt`` / ``answer``), redacted.
        redact: the function applied to captured content (default masks credentials,
            e-mail addresses, phone and card numbers, SSNs and IBANs; see
            :class:`~llmguard_sdk.telemetry.redaction.Redactor` for more). One that fails
            (raises, or gives no string) has its content exported as ``[redaction failed]``
            (logged), never unredacted; the call's spans and points go out as ever.
        max_content_chars: captured content is cut to this many characters.
        log_level: the level of the per-call log record (``None``: no record).
        semconv: ``"latest"`` (today's GenAI conventions) or ``"previous"`` (the v1.36.0
            names: ``gen_ai.system`` ...); default: what ``OTEL_SEMCONV_STABILITY_OPT_IN``
            asks (``gen_ai_latest_experimental``), else ``"latest"``.
        eval_sink: an :class:`~llmguard_sdk.telemetry.sampling.EvalSink` that samples calls
            (request, answer, route, cost, feedback) into an evaluation set.
        anomalies: alerts on tokens per request, cost per feature per hour and error rate
            against their rolling baselines (:class:`~llmguard_sdk.telemetry.anomaly.
            Anomalies`; ``True``: the defaults, ``False``: none).
        max_label_values: at most this many distinct values of each metric attribute
            (feature, release, model ...); further new values are recorded as ``"other"``
            (logged once), so a per-request value cannot grow the series without end.
            Spans keep the full values.
        propagate: send each attempt's trace context with its HTTP request (W3C
            ``traceparent`` / ``tracestate`` of the attempt's span, and what else the global
            propagator injects: the caller's ``baggage`` by default), so a server that
            traces requests (vLLM, a gateway) makes its spans children of the attempt's.
            ``True`` (default): every route's requests, as OpenTelemetry's HTTP client
            instrumentations do; a collection of route names: those routes' only (your own
            servers, not a third-party API), a deployment group's name standing for each
            of its deployments; ``False``: none. Nothing is sent while no tracer provider of
            an SDK is configured. A name that is no route or group of a Guard the Telemetry
            is given to (nor of a Guard it was given to before: one Telemetry may serve
            Guards with other routes, as a release's shadow Guard does) is a
            :class:`~llmguard_sdk.TelemetryConfigWarning` as that Guard is built, once.

    .. versionchanged:: 0.2.0
       ``semconv``: the current conventions (cache and stream attributes) or the previous;
       ``max_label_values``; ``propagate``.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool = False,
        redact: Callable[[str], str] = redact,
        max_content_chars: int = 1000,
        log_level: int | None = logging.DEBUG,
        semconv: SemconvMode | None = None,
        eval_sink: EvalSink | None = None,
        anomalies: Anomalies | bool = True,
        max_label_values: int = 100,
        propagate: bool | Collection[str] = True,
    ) -> None:
        check_parts(capture_content, redact, eval_sink, anomalies)
        self._propagation = Propagation(checked_propagate(propagate))
        self.eval_sink = eval_sink
        self.anomalies = Anomalies() if anomalies is True else anomalies or None
        self.names: Names = names_for(semconv)
        self.capture_content = capture_content
        self._explicit = tracer_provider is not None or meter_provider is not None
        self._sdk_configured = self._sdk_tracing = False
        self._sdk_checked_until = -float("inf")
        # whether spans reach an SDK: the given tracer provider's (None: the global one's)
        self._own_tracing = (
            None if tracer_provider is None else type(tracer_provider).__name__ not in _PROXIES
        )
        self._redact = redact
        self._max_chars, self._log_level = check_options(max_content_chars, log_level)
        self._tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider=tracer_provider)
        meter = CappedMeter(
            metrics.get_meter(_SCOPE, __version__, meter_provider=meter_provider),
            checked_number(
                "Telemetry", "max_label_values", max_label_values, whole=True, at_least=1
            ),
        )
        self._metrics = Instruments(meter, self.names)
        self._quality = Quality(meter, self._tracer)

    def __repr__(self) -> str:
        return f"Telemetry(capture_content={self.capture_content})"

    # -- called by the pipeline -------------------------------------------------------------

    def parent(self) -> object:
        """The context a call's span will be a child of (captured when the call starts)."""
        return otel_context.get_current()

    def propagated_routes(self, chain: Mapping[str, Collection[str]]) -> bool | frozenset[str]:
        """The routes of a Guard being built whose requests carry their trace context
        (``True``: all; ``False``: none), from ``chain``: the route names each name of its
        chain (a route, a deployment group, a group's deployment) stands for. Warns of a
        ``propagate`` name that is none of them (see the class docs)."""
        return self._propagation.routes(chain)

    def trace_attempt(
        self,
        ctx: CallContext,
        routes: tuple[Provider, ...],
        attempt: AttemptRecord,
        request: ChatRequest,
        propagated: bool | frozenset[str] | None = None,
    ) -> ChatRequest:
        """The request ``attempt`` (the call's last, just begun) sends: ``request`` with the
        trace context of the attempt's span in its headers, where it is propagated to the
        attempt's route (``propagated``: the Guard's :meth:`propagated_routes`; ``None``:
        the names given, as route names) and an SDK is configured (the call's span and the
        attempt's are then started now, not as the call ends); else ``request`` itself."""
        wanted = self._propagation.wanted if propagated is None else propagated
        if wanted is False or (wanted is not True and attempt.route not in wanted):
            return request
        if not self._tracing():
            return request
        headers = start_traced_attempt(self._tracer, self.names, ctx, routes, attempt)
        return with_trace(request, headers) if headers else request

    def on_breaker_transition(self, transition: BreakerTransition) -> None:
        """A breaker hook: counts transitions by route and new state."""
        self._metrics.transitions.add(
            1,
            {
                "llmguard.route": transition.route,
                "llmguard.breaker.from": transition.before,
                "llmguard.breaker.to": transition.after,
            },
        )

    def on_protect_event(self, event: CallEvent) -> None:
        """A Guard hook for ``@guard.protect`` calls (a vendor SDK call inside): one span
        and the duration and token metrics, from the :class:`~llmguard_sdk.CallEvent`."""
        if event.kind != "protect" or not self._exporting():
            return
        end_ns = time.time_ns()
        attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            self.names.provider: event.provider or UNKNOWN,  # the SDK's: openai, anthropic
            "gen_ai.request.model": event.model or "",
            "llmguard.route": event.route or next((r for r, _ in event.route_errors), UNKNOWN),
            "llmguard.kind": "protect",
            "llmguard.attempts": event.attempts,
            "llmguard.outcome": event.outcome,
        }
        add_scope(attributes, event.scope, event.retries)
        if event.error is not None:
            attributes["error.type"] = exception_type(event.error)
        if event.usage is not None:
            attributes["gen_ai.usage.input_tokens"] = event.usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = event.usage.output_tokens
        span = self._tracer.start_span(
            f"chat {event.model or ''}".strip(),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=end_ns - int(event.latency_s * 1e9),
        )
        if event.error is not None:
            failed(span, event.error, event.scope, end_ns)
        span.end(end_time=end_ns)
        labels = {
            key: attributes[key]
            for key in (
                "gen_ai.operation.name", self.names.provider, "gen_ai.request.model",
                "llmguard.route",
            )
        }  # fmt: skip
        for key in ("error.type", "llmguard.feature"):  # as a guarded call's points have them
            if key in attributes:
                labels[key] = attributes[key]
        self._metrics.duration.record(event.latency_s, labels)
        if event.usage is not None:
            for token_type, count in (
                ("input", event.usage.input_tokens),
                ("output", event.usage.output_tokens),
            ):
                self._metrics.tokens.record(count, {**labels, "gen_ai.token.type": token_type})

    def on_budget_event(self, event: BudgetEvent) -> None:
        """A budget hook: counts events and records what the scope has left (by the
        scope's kind for tenant and user scopes: no ids on metrics)."""
        scope = scope_label(event.scope)
        labels: Attributes = {
            "llmguard.budget": event.budget,
            "llmguard.budget.event": event.kind,
        }
        if event.action:
            labels["llmguard.budget.action"] = event.action
        self._metrics.budget_events.add(1, labels)
        if event.kind in ("alert", "exhausted") and event.limit_usd:
            self._metrics.budget_left.set(
                max(0.0, event.limit_usd - event.spent_usd),
                {"llmguard.budget": event.budget, "llmguard.budget.scope": scope},
            )

    def on_release_event(self, event: ReleaseEvent) -> None:
        """A release event: counted by kind, release and model (a retiring one)."""
        labels: Attributes = {
            "llmguard.release.event": event.kind,
            "llmguard.release": event.release,
        }
        if event.model is not None:
            labels["gen_ai.request.model"] = event.model
        self._quality.release_events.add(1, labels)

    def record(
        self,
        ctx: CallContext,
        routes: tuple[Provider, ...],
        kind: Literal["chat", "stream", "protect"],
        *,
        response: ChatResponse | None,
        error: BaseException | None,
        cancelled: bool,
        cache_on: bool,
    ) -> None:
        """Export one finished call: its span and attempt spans, metric points, a log record;
        its quality signals; the answer's ``metadata["call_id"]`` for :meth:`feedback`."""
        call_id = _call_ids.next()
        if response is not None:
            response.metadata["call_id"] = call_id
        anomalies = self._watch(ctx, response, error)  # their hooks and log see them
        exporting = ctx.span is not None or self._exporting()
        sink = self.eval_sink
        if not exporting and not self._logging() and sink is None:
            if response is not None:  # (what quality_labels(ctx, {}) holds, no dict built)
                release = ctx.release or (ctx.request.metadata or {}).get("release")
                self._quality.remember_unexported(call_id, ctx.scope.feature, release)
            return  # nothing would see the work: keep the no-SDK path cheap
        signals = signals_of(ctx.request, response, error)
        end = ctx.started + ctx.elapsed()
        call = self._call_attributes(ctx, routes, kind, response, error, cancelled, cache_on)
        call["llmguard.call_id"] = call_id
        if signals:
            call["llmguard.quality.signals"] = signals
        span = None
        labels = quality_labels(ctx, call)
        if exporting:
            events = _span_events(signals, anomalies) + (ctx.task.events() if ctx.task else [])
            span = self._export_spans(ctx, routes, call, end, error, cancelled, events)
            self._metrics.record_call(ctx, routes, kind, call, response)
            if signals:
                self._quality.count(signals, labels)
            if anomalies:
                self._quality.anomalies(anomalies)
        if response is not None:
            self._quality.remember(call_id, labels, span)
        self._log(call, ctx.elapsed(), ctx.attempts, ctx.request, response)
        if sink is not None and not (response is not None and response.metadata.get("cache")):
            sink.offer(lambda: call_record(sink, ctx, call, response), call_id)

    def refused(
        self,
        kind: Literal["chat", "stream"],
        error: BaseException | None,
        *,
        scope: Scope,
        model: str | None,
        routes: tuple[Provider, ...],
        started: float,
        started_ns: int,
    ) -> None:
        """Export a call refused before its first attempt (an invalid request, an input
        guardrail's refusal, one over ``max_input_tokens``) as the conventions have a failed
        operation: its span under the current one (an ERROR status, ``error.type``), a
        duration point with ``error.type``, its quality signal, a log record. ``error``
        None: cancelled while its input filters ran, exported as a cancelled call is."""
        exporting = self._exporting()
        if not exporting and not self._logging():
            return  # (the no-SDK path, as a call's)
        elapsed = time.monotonic() - started
        first = routes[0] if routes else None
        model = model or (first.model if first is not None else None) or ""
        call = operation(self.names, first, model, server=False)  # (no request went out)
        outcome = "error" if error is not None else "cancelled"
        call.update({"llmguard.kind": kind, "llmguard.attempts": 0, "llmguard.outcome": outcome})
        if error is not None:
            call["error.type"] = exception_type(error)
        add_scope(call, scope, ())
        signals = signals_of(None, None, error)
        if signals:
            call["llmguard.quality.signals"] = signals
        if exporting:
            end_ns = started_ns + int(elapsed * 1e9)
            span = self._tracer.start_span(
                f"chat {model}".strip(),
                kind=SpanKind.CLIENT,
                attributes=call,
                start_time=started_ns,
            )
            for name, attributes in _span_events(signals, []):
                span.add_event(name, attributes, timestamp=end_ns)
            if error is not None:
                failed(span, error, scope, end_ns)
            else:
                span.set_attribute("llmguard.cancelled", True)
            span.end(end_time=end_ns)
            self._metrics.record_refused(elapsed, call, scope.feature, self._quality, signals)
        self._log(call, elapsed, 0, None, None)

    def _watch(
        self, ctx: CallContext, response: ChatResponse | None, error: BaseException | None
    ) -> list[AnomalyEvent]:
        """The call's anomalies, if watched (cache hits and invalid requests are not)."""
        if self.anomalies is None or isinstance(error, RequestValidationError):
            return []
        if response is not None and response.metadata.get("cache"):
            return []
        usage = response.usage if response is not None else None
        return self.anomalies.observe(
            ctx.scope.feature,
            usage.total_tokens if usage is not None else None,
            response.cost_usd if response is not None else ctx.unserved_usd,
            failed=error is not None,
        )

    def feedback(self, call_id: str, score: float, *, label: str | None = None) -> bool:
        """Record the application's ``score`` for the call whose answer carried
        ``metadata["call_id"]`` (``label``: what kind of score, e.g. ``"thumbs"``): a point on
        ``llmguard.feedback.score`` with the call's feature, route and release, and an
        ``llmguard.feedback`` span linked to the call's span. Returns whether the call was
        known (one of the last 10,000 calls of this Telemetry).

        Raises:
            RequestValidationError: ``score`` is not a finite number, or ``call_id`` or
                ``label`` not a string.

        .. versionadded:: 0.2.0
        """
        known = self._quality.feedback(call_id, score, label) is not None
        if self.eval_sink is not None:
            self.eval_sink.feedback(call_id, score, label)
        return known

    def _exporting(self) -> bool:
        """False while only the API's proxies exist (no SDK configured): spans and metric
        points would go nowhere."""
        if self._explicit:
            return True
        self._look_up()
        return self._sdk_configured

    def _tracing(self) -> bool:
        """Whether spans reach an SDK's tracer provider (given, or configured globally)."""
        if self._own_tracing is not None:
            return self._own_tracing
        self._look_up()
        return self._sdk_tracing

    def _look_up(self) -> None:
        """Whether the global providers are an SDK's, looked up at most every
        ``_SDK_CHECK_SECONDS`` (the lookup reads the environment), so an SDK configured
        later is used within that time."""
        now = time.monotonic()
        if now >= self._sdk_checked_until:
            self._sdk_checked_until = now + _SDK_CHECK_SECONDS
            self._sdk_tracing = type(trace.get_tracer_provider()).__name__ not in _PROXIES
            self._sdk_configured = (
                self._sdk_tracing or type(metrics.get_meter_provider()).__name__ not in _PROXIES
            )

    def _logging(self) -> bool:
        return self._log_level is not None and _CALL_LOG.isEnabledFor(self._log_level)

    # -- pieces -----------------------------------------------------------------------------

    def _call_attributes(
        self,
        ctx: CallContext,
        routes: tuple[Provider, ...],
        kind: str,
        response: ChatResponse | None,
        error: BaseException | None,
        cancelled: bool,
        cache_on: bool,
    ) -> Attributes:
        """The call span's attributes, built in one dict (the log record's fields too)."""
        first = call_route(ctx, routes)
        served = route_of(ctx, routes, ctx.route) if error is None else None
        attributes = operation(
            self.names,
            served or first,
            requested_model(ctx, first),
            server=bool(ctx.attempt_log),  # (a cache hit: no request went out)
        )
        attributes["llmguard.kind"] = kind
        attributes["llmguard.attempts"] = ctx.attempts
        attributes["llmguard.outcome"] = "error" if error else "cancelled" if cancelled else "ok"
        add_request(attributes, ctx.request)
        if self.names.stream is not None and kind != "protect":
            attributes[self.names.stream] = kind == "stream"
        add_scope(attributes, ctx.scope, ctx.retries)
        if ctx.task is not None:  # task routing: the tier, a cascade's escalations
            attributes.update(ctx.task.attributes())
        if ctx.rate_wait_s:
            attributes["llmguard.rate_limit_wait_s"] = round(ctx.rate_wait_s, 6)
        if ctx.hedge_after is not None:
            attributes["llmguard.hedge_after_s"] = ctx.hedge_after
        if ctx.first_token_at is not None:
            attributes["llmguard.time_to_first_token_s"] = ctx.first_token_at - ctx.started
            add_first_chunk(attributes, ctx, self.names)
        if error is not None:
            attributes["error.type"] = exception_type(error)
        if ctx.release is not None:  # which release served the call, on which side
            attributes["llmguard.release"] = ctx.release
            attributes["llmguard.release.arm"] = ctx.arm or "control"
            if ctx.prompt_version is not None:  # (the span's: no metric label)
                attributes["llmguard.release.prompt_version"] = ctx.prompt_version
        if response is not None:
            add_response(attributes, response, self.names)
        else:  # no answer: what its attempts that went out used and cost, as charged
            add_unserved(attributes, ctx.unserved_usage(), ctx.unserved_usd)
        if cache_on:
            hit = response.metadata.get("cache") if response is not None else None
            attributes["llmguard.cache"] = hit or ("skipped" if ctx.cache_skipped else "miss")
            if hit and response is not None and "similarity" in response.metadata:
                attributes["llmguard.cache.similarity"] = response.metadata["similarity"]
        return attributes

    def _export_spans(
        self,
        ctx: CallContext,
        routes: tuple[Provider, ...],
        call: Attributes,
        end: float,
        error: BaseException | None,
        cancelled: bool,
        events: list[tuple[str, Attributes]],
    ) -> trace.SpanContext | None:
        name = f"chat {call['gen_ai.request.model']}".strip()
        span = ctx.span  # started as its first attempt began (see trace_attempt)
        if span is None:
            parent = ctx.trace_parent if ctx.trace_parent is not None else self.parent()
            span = self._tracer.start_span(
                name,
                context=parent,  # type: ignore[arg-type]
                kind=SpanKind.CLIENT,
                attributes=call,
                start_time=ctx.started_ns,
            )
        else:
            if getattr(span, "name", name) != name:  # (an SDK span tells its name)
                span.update_name(name)
            span.set_attributes(call)
        if not span.is_recording():
            end_started(ctx, end)  # (unsampled spans, started to be propagated)
            span.end(end_time=wall_ns(ctx, end))
            return None
        for name, attributes in events:
            span.add_event(name, attributes)
        for name, failure in ctx.route_errors.items():
            span.add_event(
                "llmguard.route_failed",
                {"llmguard.route": name, "error.type": exception_type(failure)},
                timestamp=wall_ns(ctx, end),
            )
        if self.capture_content:
            text = self._content(ctx.request.last_user_text())
            span.set_attribute("gen_ai.input.messages", input_messages(text))
        inside = trace.set_span_in_context(span)
        write_attempts(self._tracer, ctx, routes, inside, end)
        if error is not None:
            failed(span, error, ctx.scope, wall_ns(ctx, end))
        elif cancelled:
            span.set_attribute("llmguard.cancelled", True)
        span.end(end_time=wall_ns(ctx, end))
        return span.get_span_context()

    def _log(
        self,
        call: Attributes,
        elapsed: float,
        attempts: int,
        request: ChatRequest | None,
        response: ChatResponse | None,
    ) -> None:
        if self._log_level is None or not self._logging():
            return
        fields = {key: value for key, value in call.items()}
        if self.capture_content:
            if request is not None:
                fields["prompt"] = self._content(request.last_user_text())
            if response is not None:
                fields["answer"] = self._content(response.text)
        error = call.get("error.type")
        _CALL_LOG.log(
            self._log_level,
            "llmguard %s %s: %s in %.0f ms, %d attempt(s)%s",
            call.get("llmguard.kind"),
            call.get("gen_ai.request.model"),
            call.get("llmguard.served_by", "no route"),
            elapsed * 1000,
            attempts,
            f", {error}" if error else "",
            extra={"llmguard": fields},
        )

    def _content(self, text: str) -> str:
        return captured(self._redact, text, self._max_chars)


def _span_events(signals: list[str], anomalies: list[AnomalyEvent]) -> list[tuple[str, Attributes]]:
    """The call span's events for its quality signals and anomalies."""
    events: list[tuple[str, Attributes]] = [
        ("llmguard.quality", {"llmguard.quality.signal": signal}) for signal in signals
    ]
    for found in anomalies:
        attributes: Attributes = {
            "llmguard.anomaly": found.kind,
            "llmguard.anomaly.value": found.value,
            "llmguard.anomaly.baseline": found.baseline,
        }
        events.append(("llmguard.anomaly", attributes))
    return events
