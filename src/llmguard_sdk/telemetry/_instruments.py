"""The metric instruments of one :class:`~llmguard_sdk.telemetry.Telemetry` (each created
once, when the Telemetry is: never per call; with the GenAI conventions' advised buckets), and
the points a finished call records on them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._attributes import add_server, route_of
from ._labels import CappedMeter
from ._semconv import Names

if TYPE_CHECKING:
    from ..context import CallContext
    from ..models import ChatResponse
    from ..providers.base import Provider
    from ._quality import Quality

__all__ = ["Instruments"]

_TOKEN_BUCKETS = [4**i for i in range(14)]  # the conventions' advice: 1, 4 ... 67108864
_DURATION_BUCKETS = [0.01 * 2**i for i in range(14)]  # theirs too: 0.01, 0.02 ... 81.92 s
# a call's llmguard.cache when a provider answered it: the cache missed, or skipped the call
_PROVIDER_SERVED = frozenset({"miss", "skipped"})
_METRIC_KEYS = (  # of the call's attributes, those its duration and token points carry too
    "gen_ai.response.model", "error.type", "llmguard.served_by", "llmguard.release",
    "llmguard.release.arm",
    "server.address", "server.port",  # the span's: the route that answered (none: no request)
)  # fmt: skip
Attributes = dict[str, Any]


def _seconds(meter: CappedMeter, name: str, description: str) -> Any:
    """A histogram of durations: unit ``s``, the conventions' duration buckets (which they
    advise for every GenAI duration, ``time_per_output_chunk`` included)."""
    return meter.create_histogram(
        name,
        unit="s",
        description=description,
        explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
    )


class Instruments:
    """The counters, histograms and gauge a Telemetry records on (see the package docs)."""

    def __init__(self, meter: CappedMeter, names: Names) -> None:
        self._provider = names.provider
        self.duration = _seconds(
            meter, "gen_ai.client.operation.duration", "GenAI operation duration"
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Measures number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.first_chunk = _seconds(
            meter,
            names.first_chunk_metric,
            "Time from the request to the first content chunk of a stream",
        )
        self.chunk_gap = _seconds(
            meter,
            names.chunk_gap_metric,
            "Time between consecutive content chunks of a stream",
        )
        self.ttft = _seconds(
            meter,
            "llmguard.time_to_first_token",
            "From the caller's call to the first content token (end to end)",
        )
        self.speed = meter.create_histogram(
            "llmguard.output_tokens_per_second",
            unit="{token}/s",
            description="Output tokens per second of a stream after its first token",
        )
        self.cost = meter.create_counter(
            "llmguard.cost", unit="USD", description="Cost of calls (unanswered: what went out)"
        )
        self.cache = meter.create_counter(
            "llmguard.cache.lookups", description="Response cache lookups by result"
        )
        self.transitions = meter.create_counter(
            "llmguard.breaker.transitions", description="Circuit breaker state changes"
        )
        self.retries = meter.create_counter(
            "llmguard.retries", description="Retries made by guarded calls"
        )
        self.budget_events = meter.create_counter(
            "llmguard.budget.events", description="Budget alerts, exhaustion, runaway calls"
        )
        self.budget_left = meter.create_gauge(
            "llmguard.budget.remaining",
            unit="USD",
            description="What a budget scope had left at its last alert or refusal (tenant and "
            "user scopes: the last one of the budget's)",
        )
        self.cascades = meter.create_counter(
            "llmguard.cascade.calls",
            description="Calls whose tier was a cascade, by whether they escalated "
            "(the escalation rate)",
        )

    def record_refused(
        self,
        elapsed: float,
        call: Attributes,
        feature: str | None,
        quality: Quality,
        signals: list[str],
    ) -> None:
        """The points of a call refused before its first attempt (``call``: its span's
        attributes): its duration, with ``error.type``, and its quality signals."""
        labels = {key: call[key] for key in ("gen_ai.operation.name", self._provider)}
        labels["gen_ai.request.model"] = call["gen_ai.request.model"]
        if "error.type" in call:  # (none: a call cancelled in its input filters)
            labels["error.type"] = call["error.type"]
        if feature is not None:
            labels["llmguard.feature"] = feature
        self.duration.record(elapsed, labels)
        if signals:
            quality.count(signals, {"llmguard.feature": feature} if feature is not None else {})

    def record_call(
        self,
        ctx: CallContext,
        routes: Sequence[Provider],
        kind: str,
        call: Attributes,
        response: ChatResponse | None,
    ) -> None:
        """The metric points of one finished call, labelled from its span's attributes
        ``call``: its duration, tokens, cost, retries, cascade, cache lookup; a stream's
        first token and chunk times (each attempt's with its route's server, among the
        Guard's ``routes`` or the call's own) and its output speed."""
        provider = self._provider
        labels: Attributes = {
            "gen_ai.operation.name": "chat",
            provider: call[provider],
            "gen_ai.request.model": call["gen_ai.request.model"],
        }
        for key in _METRIC_KEYS:
            if key in call:
                labels[key] = call[key]
        cache = call.get("llmguard.cache")
        if cache is not None:
            self.cache.add(1, {"llmguard.cache": cache})
            if cache not in _PROVIDER_SERVED:
                labels["llmguard.cache"] = cache  # never mixed into provider latency
        if ctx.scope.feature is not None:
            labels["llmguard.feature"] = ctx.scope.feature
        self.duration.record(ctx.elapsed(), labels)
        if ctx.retries:
            self.retries.add(len(ctx.retries), {"llmguard.kind": kind})
        if ctx.task is not None and ctx.task.cascade_name is not None:
            self.cascades.add(1, ctx.task.metric_labels())
        served_by_provider = response is not None and (cache is None or cache in _PROVIDER_SERVED)
        if served_by_provider and response is not None and response.usage is not None:
            self._record_tokens(response.usage.input_tokens, response.usage.output_tokens, labels)
        elif response is None and "gen_ai.usage.input_tokens" in call:
            # no answer: the tokens its attempts that went out were charged for, as its cost
            self._record_tokens(
                call["gen_ai.usage.input_tokens"],
                call["gen_ai.usage.output_tokens"],
                {**labels, "llmguard.usage.estimated": call["llmguard.usage.estimated"]},
            )
        cost = response.cost_usd if response is not None else ctx.unserved_usd
        if cost:  # (no answer: its attempts that went out, as its budgets were charged)
            source = response.cost_source if response is not None else "estimated"
            cost_labels: Attributes = {"llmguard.cost_source": source or "unknown"}
            if ctx.scope.feature is not None:
                cost_labels["llmguard.feature"] = ctx.scope.feature
            self.cost.add(cost, cost_labels)
        if kind == "stream" and served_by_provider:
            self._stream_metrics(ctx, routes, labels, response)

    def _record_tokens(self, input_tokens: int, output_tokens: int, labels: Attributes) -> None:
        """A call's input and output token points."""
        for token_type, count in (("input", input_tokens), ("output", output_tokens)):
            self.tokens.record(count, {**labels, "gen_ai.token.type": token_type})

    def _stream_metrics(
        self,
        ctx: CallContext,
        routes: Sequence[Provider],
        labels: Attributes,
        response: ChatResponse | None,
    ) -> None:
        """Time to first token, per attempt time to first chunk and the gaps between
        chunks (with the server of the attempt's route, as its span has it), and output
        tokens per second of a stream a provider served."""
        if ctx.first_token_at is not None:
            self.ttft.record(ctx.first_token_at - ctx.started, labels)
        provider = self._provider
        for attempt in ctx.attempt_log:  # the call's first three labels, the route, its server
            attempt_labels: Attributes = {
                "gen_ai.operation.name": "chat",
                provider: labels[provider],
                "gen_ai.request.model": labels["gen_ai.request.model"],
                "llmguard.route": attempt.route,
            }
            add_server(attempt_labels, route_of(ctx, routes, attempt.route))
            if attempt.first_token_at is not None:
                self.first_chunk.record(attempt.first_token_at - attempt.started, attempt_labels)
            for gap in attempt.chunk_gaps:
                self.chunk_gap.record(gap, attempt_labels)
        last = ctx.attempt_log[-1] if ctx.attempt_log else None
        if last and last.first_token_at and last.ended and response and response.usage:
            streaming_s = last.ended - last.first_token_at
            if streaming_s > 0 and response.usage.output_tokens > 1:
                self.speed.record((response.usage.output_tokens - 1) / streaming_s, labels)
