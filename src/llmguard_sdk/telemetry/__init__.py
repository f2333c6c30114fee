"""OpenTelemetry traces and metrics for guarded calls, and one structured log record each.

Only ``opentelemetry-api`` is needed at run time: without an SDK configured by the
application every span and instrument is a no-op. ``Guard(telemetry=True)`` (the default)
uses the global tracer and meter providers; ``Guard(telemetry=Telemetry(...))`` takes
explicit ones and the content and logging options.

**Conventions.** Today's GenAI semantic conventions by default: ``gen_ai.provider.name``,
``gen_ai.usage.cache_read.input_tokens`` / ``cache_creation.input_tokens``,
``gen_ai.request.stream``, ``gen_ai.response.time_to_first_chunk`` and the
``gen_ai.client.operation.time_to_first_chunk`` / ``time_per_output_chunk`` metrics.
``Telemetry(semconv="previous")``, or ``OTEL_SEMCONV_STABILITY_OPT_IN`` set without
``gen_ai_latest_experimental`` (as the OpenTelemetry instrumentations read it), emits the
v1.36.0 names instead (``gen_ai.system``; what v1.36.0 has no name for under ``llmguard.*``).
A test checks every name and type against the conventions' own YAML models.

**Spans.** One ``CLIENT`` span per guarded call, named ``chat {model}``: the call's GenAI
operation, its retries and fallbacks included (as the conventions have it for a retried
request), with the GenAI semantic-convention attributes (``gen_ai.operation.name``,
``gen_ai.provider.name``, ``gen_ai.request.model``, ``server.address`` / ``server.port`` (of
the route that answered, else the first one tried), ``gen_ai.response.model``,
``gen_ai.usage.input_tokens`` / ``output_tokens`` and the cache token counts,
``gen_ai.request.max_tokens``, ``temperature``, ``top_p``, ``stop_sequences``, ``seed``, the
penalties and ``choice.count`` (from ``extra_body``), ``gen_ai.output.type`` (when a
``response_format`` asks), ``gen_ai.request.stream``, ``gen_ai.response.time_to_first_chunk``
(streams), ``gen_ai.response.finish_reasons``, ``error.type``) and ours under
``llmguard.*``: ``feature``, ``tenant`` (hashed),
``served_by``, ``attempts``, ``cache`` (``exact`` / ``semantic`` / ``stale`` / ``miss``, or
``skipped``: a call the cache does not serve, opted out, sampled or for an end user) and
``cache.similarity``, ``cost_usd`` and ``cost_source``, ``retry_wait_s``,
``rate_limit_wait_s``, ``time_to_first_token_s`` (streams), ``degraded``. The operation, the
provider, the model and the server are given as the span starts, for samplers (where the
span starts as the first attempt begins, to carry its trace context, and the call's routes
have more than one server, the server is set as the call ends, once the route that answered
is known, as the metric points name it). A child
``INTERNAL`` span per provider attempt, ``llmguard.attempt``, carries ``llmguard.route``,
``llmguard.attempt``, ``server.address`` / ``server.port``, ``llmguard.retry_wait_s`` (the
wait that followed it) and, for streams, ``llmguard.time_to_first_chunk_s``, and no
``gen_ai.*`` attribute: no GenAI backend counts an attempt as an operation of its own;
routes that were skipped or failed (an open breaker, no rate-limit room ...) are events on
the call span. A failed call or attempt has an ERROR status, an ``exception`` event
(``exception.type`` and ``exception.message``, masked as the status is) and ``error.type``,
the exception's fully qualified class name as ``exception.type`` has it
(``llmguard_sdk.errors.ProviderUnavailableError``). Spans are written when the call ends,
with the times the call and each attempt really started and ended, under the span that was
current when the call began. A call refused before its first attempt (an invalid request or
``stream=`` value, an input guardrail's refusal, one over ``max_input_tokens``, arguments a
drop-in client or the transport seam refuses before the Guard sees them) is a failed
operation too: its span (``llmguard.attempts`` 0, ``error.type``, no server) and its duration
point.

**Trace context on requests.** With an SDK's tracer provider, each attempt's HTTP request
carries the W3C ``traceparent`` / ``tracestate`` of the attempt's span and what else the
global propagator injects (``baggage`` by default), so a server that traces requests makes
its spans children of the attempt's: the call's span and the attempt's are then started as
the attempt begins (same start times, the rest set as the call ends: the same tree).
``Telemetry(propagate=...)``: ``True`` (default: every route, as OpenTelemetry's HTTP client
instrumentations do), a collection of route names (a deployment group's standing for each of
its deployments; a name that is no route or group of the Guard is a
:class:`~llmguard_sdk.TelemetryConfigWarning` as the Guard is built), or ``False``. A
``traceparent`` the request carried is replaced by the attempt's, and its ``tracestate`` goes
with it. Without an SDK, or with
``telemetry=False``, nothing is sent and spans are built at the end as before.
A ``@guard.protect`` call's span and points name the provider of the SDK the function uses
(``gen_ai.provider.name``: ``openai``, ``anthropic`` ..., ``unknown`` when nothing tells)
and its label as ``llmguard.route``.

**Metrics.** ``gen_ai.client.operation.duration`` (s) and ``gen_ai.client.token.usage``
({token}, ``gen_ai.token.type`` input / output) as the conventions define them;
``gen_ai.client.operation.time_to_first_chunk`` (per attempt: from the request to the first
non-empty content delta) and ``gen_ai.client.operation.time_per_output_chunk`` (each gap
between content chunks) for streams; ``llmguard.time_to_first_token`` (end to end, from the
caller's call: queueing, rate-limit waits and retries included); ``llmguard.output_tokens_per_
second``; ``llmguard.cost`` (USD; a call without an answer counts what its requests that
went out cost, as its budgets were charged, and its token usage points the tokens they were
charged for, with ``llmguard.usage.estimated``, as its span has them);
``llmguard.cache.lookups`` (by result, the skipped calls apart: the hit rate is hits over hits
and misses);
``llmguard.breaker.transitions``; ``llmguard.retries``; ``llmguard.budget.events`` and
``llmguard.budget.remaining`` (at each alert or refusal, by budget and scope: a tenant or user
scope by its kind alone, no ids on metrics). Duration and token points carry the
``server.address`` / ``server.port`` of the route that answered, as the call's span does (none
for a cache hit or a refused call: no request went out); each attempt's
``time_to_first_chunk`` and ``time_per_output_chunk`` points carry its route's, as its
attempt span does. Answers from the cache carry ``llmguard.cache`` on the duration metric,
so they never mix into provider latency, and report no token usage.

**Quality signals and feedback.** Refusals, truncated and empty answers, JSON-schema
failures and guardrail rejections are counted on ``llmguard.quality.signals`` (by
``llmguard.quality.signal``, ``feature``, ``served_by`` and ``release``, the latter from the
request's ``metadata={"release": ...}``) and are ``llmguard.quality`` events on the call's
span. Every answer carries ``metadata["call_id"]`` (also the span's ``llmguard.call_id``);
:meth:`Telemetry.feedback` records the application's score for it on
``llmguard.feedback.score`` with the call's labels and as a span linked to the call's.

**Sampling for evaluation.** ``Telemetry(eval_sink=EvalSink("eval.jsonl", share=0.05))``
(:mod:`~llmguard_sdk.telemetry.sampling`) writes a share of calls, redacted, with their
route, release, cost, latency and later feedback, under a size and age limit;
``llmguard eval eval.jsonl --base-url ...`` (:mod:`~llmguard_sdk.telemetry.evaluation`)
replays them against another route or release and prints agreement, cost and latency.

**Anomaly alerts.** ``Telemetry(anomalies=...)`` (on by default,
:mod:`~llmguard_sdk.telemetry.anomaly`) compares tokens per request, cost per feature per
hour and the error rate with their rolling baselines; a departure is an ``AnomalyEvent`` for
the ``on_event`` hooks, a WARNING logged once then counted, ``llmguard.anomalies`` and an
``llmguard.anomaly`` span event. The budgets' runaway check is the tokens-per-request case.

**Logs and redaction.** One record per call on the ``llmguard_sdk.calls`` logger (DEBUG by
default) with the same fields under ``record.llmguard``. Credentials never appear in spans,
metrics, logs or exception messages
(:func:`~llmguard_sdk.telemetry.redaction.redact_secrets`); prompt and answer text is captured
only with ``capture_content=True``, passed through ``redact`` (default:
:func:`~llmguard_sdk.telemetry.redaction.redact`, which masks e-mail addresses, phone and card
numbers, US SSNs and IBANs too; a :class:`~llmguard_sdk.telemetry.redaction.Redactor` adds IP
addresses and the application's own patterns) and truncated to ``max_content_chars``.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._otel import Telemetry
    from .anomaly import Anomalies, AnomalyEvent
    from .sampling import EvalSink

__all__ = ["Anomalies", "AnomalyEvent", "EvalSink", "Telemetry"]

_HOMES = {
    "Anomalies": "anomaly",
    "AnomalyEvent": "anomaly",
    "EvalSink": "sampling",
    "Telemetry": "_otel",
}


def __getattr__(name: str) -> Any:
    """Import :class:`Telemetry` (and OpenTelemetry) and the parts passed to it
    (:class:`EvalSink`, :class:`Anomalies`) at their first use: the low modules that import
    :mod:`~llmguard_sdk.telemetry.redaction` (the exception tree) stay light."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
