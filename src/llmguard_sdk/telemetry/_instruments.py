"""The metric instruments of one :class:`~llmguard_sdk.telemetry.Telemetry`: each created
once, when the Telemetry is (never per call), with the GenAI conventions' advised buckets."""

from __future__ import annotations

from typing import Any

from ._labels import CappedMeter
from ._semconv import Names

__all__ = ["Instruments"]

_TOKEN_BUCKETS = [4**i for i in range(14)]  # the conventions' advice: 1, 4 ... 67108864
_DURATION_BUCKETS = [0.01 * 2**i for i in range(14)]  # theirs too: 0.01, 0.02 ... 81.92 s


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
