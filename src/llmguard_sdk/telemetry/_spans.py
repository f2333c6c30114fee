"""A call's attempt spans, and the trace context an attempt's request carries.

Spans are written when the call ends, with the times the call and each attempt really
started and ended: nothing is built while nobody listens. Where an attempt's request carries
its trace context (``Telemetry(propagate=...)`` with an SDK configured), its span and the
call's are started as the attempt begins instead, with the same start times and what is known
then, and finished as the call ends: the same tree (names, attributes, parents), whose ids
went out with the requests (W3C ``traceparent``, ``tracestate`` and what else the global
propagator injects: ``baggage`` by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .._copies import updated
from ..models import _HEADER_NAME, ChatRequest, _is_header_text
from ._attributes import (
    Attributes,
    add_server,
    call_route,
    error_status,
    exception_type,
    operation,
    requested_model,
    route_of,
    wall_ns,
)
from ._semconv import Names

if TYPE_CHECKING:
    from ..context import AttemptRecord, CallContext, Scope
    from ..providers.base import Provider

__all__ = [
    "ATTEMPT",
    "end_started",
    "failed",
    "start_traced_attempt",
    "with_trace",
    "write_attempts",
]


ATTEMPT = "llmguard.attempt"
"""The name of an attempt's span (an ``INTERNAL`` one under the call's ``CLIENT`` span)."""


def start_attempt(
    tracer: trace.Tracer,
    ctx: CallContext,
    attempt: AttemptRecord,
    number: int,
    route: Provider | None,
    parent: otel_context.Context,
    outcome: Attributes | None = None,
) -> trace.Span:
    """The span of ``ctx``'s attempt number ``number`` (on ``route``), started at the
    attempt's start under ``parent`` (the call's span) with what is known as it begins
    (and its ``outcome``'s attributes, when it is written as the call ends).

    The call's span is the GenAI operation (the conventions: one span for the logical
    operation, its retries included); an attempt's is ``INTERNAL``, with no ``gen_ai.*``
    attribute, so that no GenAI backend counts it as an operation of its own."""
    attributes: Attributes = {"llmguard.route": attempt.route, "llmguard.attempt": number}
    add_server(attributes, route)
    if outcome:
        attributes.update(outcome)
    return tracer.start_span(
        ATTEMPT,
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        start_time=wall_ns(ctx, attempt.started),
    )


def write_attempts(
    tracer: trace.Tracer,
    ctx: CallContext,
    routes: Sequence[Provider],
    parent: otel_context.Context,
    call_end: float,
) -> None:
    """Write the spans of the call's attempts as the call ends: those started as their
    attempts began, else new ones under ``parent`` (the call's span); each ended when its
    attempt ended (at ``call_end`` if it never did: abandoned or cancelled)."""
    for number, attempt in enumerate(ctx.attempt_log, 1):
        outcome: Attributes = {}
        if attempt.retry_wait is not None:
            outcome["llmguard.retry_wait_s"] = attempt.retry_wait
        if attempt.first_token_at is not None:
            outcome["llmguard.time_to_first_chunk_s"] = attempt.first_token_at - attempt.started
        if attempt.error is not None:
            outcome["error.type"] = exception_type(attempt.error)
        elif attempt.ended is None:
            outcome["llmguard.cancelled"] = True
        span = attempt.span
        if span is None:
            route = route_of(ctx, routes, attempt.route)
            span = start_attempt(tracer, ctx, attempt, number, route, parent, outcome)
        elif outcome:
            span.set_attributes(outcome)
        end_ns = wall_ns(ctx, attempt.ended or call_end)
        if attempt.error is not None:
            failed(span, attempt.error, ctx.scope, end_ns)
        span.end(end_time=end_ns)


def end_started(ctx: CallContext, call_end: float) -> None:
    """End the attempt spans started as their attempts began (an unsampled call's: there
    is nothing to write)."""
    for attempt in ctx.attempt_log:
        if attempt.span is not None:
            attempt.span.end(end_time=wall_ns(ctx, attempt.ended or call_end))


def _one_server(routes: Sequence[Provider]) -> bool:
    """Whether ``routes`` all have one server (or none has one)."""
    servers = {
        (getattr(r, "server_address", None), getattr(r, "server_port", None)) for r in routes
    }
    return len(servers) <= 1


def start_traced_attempt(
    tracer: trace.Tracer,
    names: Names,
    ctx: CallContext,
    routes: Sequence[Provider],
    attempt: AttemptRecord,
) -> dict[str, str]:
    """Start the span of ``attempt`` (the call's last) as it begins, and the call's span
    first if it is the call's first traced attempt; the headers that carry its trace
    context (and the caller's baggage), as the global propagator writes them."""
    from opentelemetry import propagate  # (reads its entry points: imported when first used)

    caller = cast("otel_context.Context | None", ctx.trace_parent)
    route = route_of(ctx, routes, attempt.route)
    call = ctx.span
    if call is None:  # what names its operation, for the sampler; the rest as it ends
        first = call_route(ctx, routes)  # (the route of the call's first attempt)
        # the server, where every route the call may take has the one; else the route that
        # answers names it as the call ends (a span's attribute cannot be taken back)
        one = _one_server(ctx.route_order or routes)
        attributes = operation(names, first, requested_model(ctx, first), server=one)
        call = ctx.span = tracer.start_span(
            f"chat {attributes['gen_ai.request.model']}".strip(),
            context=caller,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=ctx.started_ns,
        )
    number = next(n for n, a in enumerate(ctx.attempt_log, 1) if a is attempt)
    inside = trace.set_span_in_context(call)
    attempt.span = start_attempt(tracer, ctx, attempt, number, route, inside)
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(attempt.span, caller))
    return {
        name: value
        for name, value in carrier.items()
        if isinstance(name, str)
        and isinstance(value, str)
        and _HEADER_NAME.fullmatch(name)
        and _is_header_text(value)
    }


def with_trace(request: ChatRequest, headers: dict[str, str]) -> ChatRequest:
    """``request`` with the trace ``headers`` in its ``extra_headers``, in place of any of
    the same name (any spelling) it carried: a trace context that came with the request
    (forwarded through the transport seam from an instrumented SDK client, copied from an
    incoming request) names a span before the attempt's, whose child the server's is.

    Where ``headers`` hold a ``traceparent``, a carried ``tracestate`` goes too, written
    again or not (W3C: a trace state belongs to its ``traceparent``; the propagator writes
    none where the attempt's span has no state, and the carried one would be read as
    that of the attempt's trace). Other carried headers (``baggage``) stay."""
    taken = {name.lower() for name in headers}
    if "traceparent" in taken:
        taken.add("tracestate")
    own = {k: v for k, v in (request.extra_headers or {}).items() if k.lower() not in taken}
    return updated(request, {"extra_headers": {**own, **headers}})  # (once per attempt)


def failed(span: trace.Span, error: BaseException, scope: Scope, at_ns: int) -> None:
    """Mark ``span`` failed by ``error``: an ERROR status and an ``exception`` event (the
    exception conventions' type and message; the message masked as the status is: no
    credentials, e-mail addresses, phone or card numbers, the tenant hashed, no user id; no
    stack trace, whose source lines may hold a prompt)."""
    status = error_status(error, scope)
    span.set_status(Status(StatusCode.ERROR, status))
    span.add_event(
        "exception",
        {"exception.type": exception_type(error), "exception.message": status},
        timestamp=at_ns,
    )
