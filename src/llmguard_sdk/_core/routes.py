"""What the route loop decides about a route: which model and deadline an attempt gets,
whether to retry, when to move on (:func:`fall_through`), what a refused route records, and
the answer when no route served the call."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._ids import IDEMPOTENCY_PREFIX
from ..breaker import Permit
from ..breaker._guarded import refusal
from ..context import CallContext, RetryDetails
from ..errors import (
    AllRoutesFailedError,
    BadRequestError,
    ContentPolicyError,
    ContextLengthExceededError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitExceededError,
    StreamInterruptedError,
)
from ..models import ChatRequest, ChatResponse, Message, Usage
from ..providers.base import Provider, cache_answers, context_window, is_local
from ..ratelimit import Grant
from ..ratelimit._rules import never_fits
from ..retry._testing import testing_attempts, testing_remaining, testing_wait
from ..retry._verdicts import note, note_why_not
from ..retry.policy import MIN_ATTEMPT_SECONDS, Decision, decide_for_error
from ..router.moves import is_route_failure
from .limits import Reservation, continued_input, route_input_tokens
from .stages import (
    DEGRADED,
    Stages,
    cache_request,
    from_cache,
    new_idempotency_key,
    route_error_types,
)

if TYPE_CHECKING:
    from ..cache import CacheKeys
    from .opening import CallKeys  # (opening imports this module)

__all__ = [
    "CONTINUE_PROMPT",
    "answers_cached",
    "attempt_deadline",
    "continuation_request",
    "degraded_response",
    "failure",
    "fall_through",
    "first_route",
    "is_route_failure",
    "keyed_request",
    "measures_route",
    "note_attempt_timeout",
    "note_give_up",
    "note_retry",
    "real_error",
    "refused_retry",
    "retry_after_failure",
    "route_model",
    "route_rate_limited",
    "route_refused",
    "silence_leaves_no_time",
    "stale_response",
    "stands_in",
    "still_fits",
    "to_current",
    "too_small_for",
    "with_new_keys",
]


def measures_route(error: ProviderError) -> bool:
    """Whether a failed attempt's ``error`` says how its route is doing (a failure its
    group's latency and health estimate counts): a route failure, but none of a request the
    provider refused as this request's fault (a 400 or 422: too long for the context window,
    a kind of call the route cannot serve, a content policy or any refusal ``moves_on``
    handed on), which moves the call on and says nothing of the route (a 402 or 404 does:
    no credit, no such model there)."""
    if isinstance(error, BadRequestError) and error.status_code not in (402, 404):
        return False
    return is_route_failure(error)


def route_model(route: Provider, request: ChatRequest) -> str:
    """The model a route serves this request with: the route's own, else the request's."""
    model = route.model or request.model
    assert model is not None  # prepare() checked it
    return model


def attempt_deadline(ctx: CallContext) -> float:
    """When one non-streaming attempt must end: the call's deadline or its attempt timeout
    (the call's own, else the Guard's)."""
    if ctx.attempt_timeout is None:
        return ctx.deadline
    return min(ctx.deadline, time.monotonic() + ctx.attempt_timeout)


def retry_after_failure(
    ctx: CallContext,
    stages: Stages,
    error: ProviderError,
    *,
    attempt: int,
    previous_wait: float,
    delivered: bool = False,
) -> Decision:
    """Whether to retry the same route after ``error`` (before the retry budget is asked);
    with waits off (:func:`~llmguard_sdk.retry.set_testing`), a wait not taken does not
    count against the call's deadline, as for :func:`~llmguard_sdk.retry.retry`."""
    policy = stages.retry
    if policy is None:
        return Decision(False, 0.0, "attempts-exhausted")
    attempts = testing_attempts(policy.attempts)
    if attempts != policy.attempts:
        policy = dataclasses.replace(policy, attempts=attempts)
    return decide_for_error(
        policy,
        error,
        attempt=attempt,
        remaining=testing_remaining(ctx.remaining()),
        previous_wait=previous_wait,
        delivered=delivered,
    )


def note_attempt_timeout(ctx: CallContext, route: Provider, error: ProviderError) -> None:
    """Say on a timeout that the attempt's own ``attempt_timeout`` cut it, not the call's
    deadline (its message says "the call's deadline passed": the provider is given the
    sooner of the two)."""
    silence, status, left = ctx.attempt_timeout, error.status_code, ctx.remaining()
    if silence is None or not isinstance(error, ProviderTimeoutError) or left <= 0:
        return
    if status is None or status < 400:
        note(
            error,
            f"attempt_timeout={silence:g} s passed before route {route.name!r} answered; "
            f"the call's timeout had {left:.2f} s left",
        )


def silence_leaves_no_time(
    ctx: CallContext,
    route: Provider,
    error: ProviderError,
    decision: Decision,
    left: Sequence[Provider],
) -> bool:
    """Whether a retry of ``route``, silent for the call's ``attempt_timeout`` (no answer,
    or no first chunk, in time: not a 408 or 504 it answered), would leave the next of the
    routes ``left`` less than its own ``attempt_timeout`` should the retry be silent too:
    then the call moves on now (a note on the error says so), so a hung route never spends
    the whole ``timeout`` on its retries and the next route always gets its turn. The last
    route is retried while the time allows."""
    status, silence = error.status_code, ctx.attempt_timeout
    if (
        not left
        or silence is None
        or not isinstance(error, ProviderTimeoutError)
        or (status is not None and status >= 400)
        or decision.wait + 2 * silence <= ctx.remaining()
    ):
        return False
    note(
        error,
        f"not retried: route {route.name!r} was silent for attempt_timeout={silence:g} s, "
        f"and a retry as silent would leave route {left[0].name!r} less than that of the "
        "call's timeout: the call moved on to it",
    )
    return True


def note_give_up(
    ctx: CallContext, stages: Stages, error: ProviderError, decision: Decision, attempt: int = 0
) -> None:
    """Say on ``error`` why the route's retries stopped after it (a server's wait past the
    cap or the time left, the attempts, the retry budget, no time for another attempt);
    nothing when retries are off or the error is not one to retry."""
    if stages.retry is None:
        return
    if decision.retry:  # a retry allowed, then no time left for it (the budget's round trip)
        decision = Decision(False, decision.wait, "deadline", hinted=decision.hinted)
    note_why_not(error, decision, stages.retry, attempt=attempt, remaining=ctx.remaining())


def still_fits(ctx: CallContext, decision: Decision) -> bool:
    """Whether the retry's wait still leaves the next attempt time (the budget took some;
    with waits off, only the time really spent counts)."""
    return decision.wait + MIN_ATTEMPT_SECONDS <= testing_remaining(ctx.remaining())


def real_error(error: ProviderError, previous: ProviderError | None) -> ProviderError:
    """``error``, unless it only says the deadline ran out before a retry could be sent:
    then the previous attempt's error is the one worth reporting."""
    if previous is not None and isinstance(error, ProviderTimeoutError) and not error.request_sent:
        return previous
    return error


def note_retry(
    ctx: CallContext, route: Provider, error: ProviderError, attempt: int, decision: Decision
) -> float:
    """Record a retry in the context; returns the seconds to sleep before it."""
    ctx.retries.append(
        RetryDetails(
            name=route.name,
            attempt=attempt,
            wait=decision.wait,
            cause=error,
            elapsed=ctx.elapsed(),
            hinted=decision.hinted,
            waited=sum(earlier.wait for earlier in ctx.retries),
        )
    )
    if ctx.attempt_log:
        ctx.attempt_log[-1].retry_wait = decision.wait
    return testing_wait(decision.wait)


def continuation_request(request: ChatRequest, partial_text: str) -> ChatRequest:
    """A request asking the next route to continue an answer that broke after ``partial_text``;
    one that broke before any text (after the model's reasoning alone) has nothing to go on
    from: the next route is asked the question as it was (no empty assistant turn, which
    Anthropic refuses), its own reasoning following the first's."""
    messages = list(request.messages)
    if partial_text:
        messages += [
            Message(role="assistant", content=partial_text),
            Message(role="user", content=CONTINUE_PROMPT),
        ]
    return with_new_keys(request.model_copy(update={"messages": messages}))


def with_new_keys(request: ChatRequest) -> ChatRequest:
    """``request`` with new idempotency keys in the place of the Guard's (a caller's own
    stay): a new body needs a new key, or the provider may answer with the old one."""
    headers = {
        name: new_idempotency_key() if value.startswith(IDEMPOTENCY_PREFIX) else value
        for name, value in (request.extra_headers or {}).items()
    }
    return request.model_copy(update={"extra_headers": headers or None})


CONTINUE_PROMPT = (
    "Your previous answer was cut off. Continue it exactly where it stopped, "
    "without repeating anything and without any preamble."
)


def fall_through(
    ctx: CallContext,
    route: Provider,
    error: ProviderError,
    *,
    delivered: bool,
    moves_on: Callable[[ProviderError], bool] | None = None,
) -> bool:
    """Record a route's failure, or re-raise it when the next route must not be tried.

    The chain moves on after errors that belong to the route: unavailable, timeouts, 429,
    malformed answers, bad credentials, no credit (402), an unknown model or path (404), a
    context window too small. It stops on a request the provider refused as wrong (400, 422
    ...), which would fail everywhere, and on a stream that already delivered text.
    ``moves_on`` replaces :func:`is_route_failure` when the Guard was given one.

    Everywhere is the arm's routes: a canary call's candidate sends its own request (its
    prompt, parameters, model), so its refusal says nothing of the current release's. Such a
    call goes on to its fallback routes (see :func:`to_current`): True, the candidate's
    routes left are skipped (they would refuse it too).
    """
    ctx.route_errors[route.name] = error
    if delivered or isinstance(error, StreamInterruptedError):
        raise error
    if not (moves_on or is_route_failure)(error):
        if not to_current(ctx, route, error):
            raise error
        return True
    return False


def to_current(ctx: CallContext, route: Provider, error: ProviderError) -> bool:
    """Whether ``error``, a request error from ``route``, moves the call to the current
    release's routes: it is a canary call's, still on its candidate (``route`` is none of
    its fallback routes), with fallback routes (``ReleasePlan(fallback_to_current=True)``).
    Not a content filter's refusal: the prompt goes to no other provider (``moves_on=``
    can hand it on)."""
    return not isinstance(error, ContentPolicyError) and on_candidate(ctx, route)


def on_candidate(ctx: CallContext, route: Provider) -> bool:
    """Whether ``route`` serves a canary call still on its candidate that has fallback routes
    (the current release's; ``route`` is none of them)."""
    fallback = ctx.fallback_routes
    return ctx.arm == "canary" and bool(fallback) and all(r.name != route.name for r in fallback)


def route_refused(ctx: CallContext, stages: Stages, route: Provider, permit: Permit) -> None:
    """Record that ``route``'s breaker refused the call (the chain moves on at once); an
    open breaker gets its route probed in the background (``BreakerPolicy.probe_every``),
    unless a 429's pause holds it open (``Permit.paused``: a probe cannot end it).

    When the breaker opened during this call's own retries, the provider error that opened
    it stays the one reported for the route.
    """
    if permit.state == "open" and not permit.paused and stages.prober is not None:
        stages.prober.maybe_probe(route, route_model(route, ctx.request))
    if stages.routing is not None:
        stages.routing.refused(route.name, permit.retry_after)
    ctx.route_errors.setdefault(route.name, refusal(route.name, permit))


def refused_retry(ctx: CallContext, route: Provider, error: ProviderError) -> None:
    """A retry of ``route`` after ``error`` was refused (its breaker opened on this call's
    own failures, or its rate limit had no room): ``error`` stays the route's, noting why
    it was not retried (the refusal was recorded in its place)."""
    refusal = ctx.route_errors.pop(route.name, None)
    if refusal is not None and refusal is not error:
        note(error, f"not retried: {type(refusal).__name__}: {refusal}")


def route_rate_limited(
    ctx: CallContext, stages: Stages, route: Provider, grant: Grant, reservation: Reservation
) -> None:
    """Record that the route's own rate limit had no room (the chain moves on at once); a
    call that never fits says which limit it is too large for, and by how much."""
    retry_after = None if grant.retry_after == math.inf else grant.retry_after
    why = {
        "never": "the call is larger than the limit allows at once",
        "concurrency": "every concurrency slot is taken",
        "queue": "the wait queue is full",
    }.get(grant.reason, "no room in time")
    if grant.reason == "never" and stages.limiter is not None:
        rules, sent, priority = stages.limiter.rules(route.name), reservation.input, ctx.priority
        output = reservation.output
        why = never_fits(rules, input_tokens=sent, output_tokens=output, priority=priority) or why
        unsized = not ctx.request.output_limit  # (its output reservation: the limits' own)
        if unsized and not never_fits(rules, input_tokens=sent, output_tokens=0, priority=priority):
            why += (  # that reservation alone makes it too large
                f" (the call set no max_tokens, so it reserved reserve_output_tokens="
                f"{output:g} output tokens: set max_tokens, or a smaller "
                "RateLimit.reserve_output_tokens)"
            )
    if stages.routing is not None and _says_of_route(ctx, stages, route, grant):
        stages.routing.refused(route.name, grant.retry_after)
    ctx.route_errors.setdefault(
        route.name,
        RateLimitExceededError(
            f"no rate-limit room on route {route.name!r}: {why}",
            key=route.name,
            retry_after=retry_after,
            reason=grant.reason,
            tenant=ctx.scope.tenant,
        ),
    )


def _says_of_route(ctx: CallContext, stages: Stages, route: Provider, grant: Grant) -> bool:
    """Whether a rate-limit refusal says the route has no room for other calls either: not
    one for this call's size, its ``batch`` priority or a tenant's own limit."""
    if grant.reason == "never" or ctx.priority != "interactive" or stages.limiter is None:
        return False
    return not any(rule.per_tenant for rule in stages.limiter.rules(route.name))


def call_routes(ctx: CallContext, stages: Stages) -> Sequence[Provider]:
    """The routes of this call in the order it tries them: its deployment groups ranked
    for it, its tier's routes, or the chain from the group its model= selected
    (``ctx.route_order``), among the routes ``stages`` allow."""
    ranked = ctx.route_order
    if not ranked:
        return stages.routes
    part = ctx.task is not None or ctx.group is not None  # a part of the chain
    if not part and len(ranked) == len(stages.routes):
        return ranked  # the whole chain, ranked (a tier may hold fewer routes, or others)
    allowed = {route.name for route in stages.routes}  # a budget's cheaper routes only
    kept = [route for route in ranked if route.name in allowed]
    if not kept and part:
        return stages.routes  # a budget downgrade left the part nothing: its routes serve
    return kept


def first_route(ctx: CallContext, stages: Stages) -> Provider | None:
    """The route the chain tries first (the first one whose context holds the request)."""
    ranked = call_routes(ctx, stages)
    return next((r for r in ranked if not too_small_for(ctx, r, continued=False)), None)


def answers_cached(ctx: CallContext, stages: Stages, route: Provider) -> bool:
    """Whether the response cache keeps ``route``'s answers: as the route declares
    (``cache_answers``); undeclared, unless it is a local route standing in for a remote one
    (see :mod:`llmguard_sdk.providers.base`)."""
    declared = cache_answers(route)
    if declared is not None:
        return declared
    if not is_local(route):
        return True
    first = first_route(ctx, stages)
    return first is None or is_local(first)


def stands_in(ctx: CallContext, stages: Stages, route: Provider) -> bool:
    """Whether ``route`` stands in for the routes before it: not the chain's first, and its
    answers are not cached (a local model behind remote ones). An expired cached answer of
    the routes it stands in for is served before it is called (stale-if-error)."""
    return not answers_cached(ctx, stages, route) and route is not first_route(ctx, stages)


def too_small_for(ctx: CallContext, route: Provider, *, continued: bool = True) -> bool:
    """Skip a route whose known context window cannot hold the request as the route's own
    model counts it (the call's count when that model counts alike), with what continuing
    an interrupted stream adds to it (``continued`` False: the request alone), and say why."""
    window = context_window(route)
    if window is None:
        return False
    extra = continued_input(ctx, route) if continued else 0
    need = route_input_tokens(ctx, route).tokens + extra + (ctx.request.output_limit or 0)
    if need <= window:
        return False
    what = "the continuation of the interrupted stream" if extra else "the request"
    ctx.route_errors[route.name] = ContextLengthExceededError(
        f"{what} needs about {need} tokens; this route's context holds {window}",
        route=route.name,
        request_sent=False,
    )
    return True


def failure(ctx: CallContext, stages: Stages) -> Exception:
    """The error to raise when no route served the call."""
    if len(stages.routes) == 1 and len(ctx.route_errors) == 1:
        (only,) = ctx.route_errors.values()
        if isinstance(only, Exception):
            return only
    return AllRoutesFailedError(ctx.route_errors)


def keyed_request(
    ctx: CallContext, stages: Stages, keyed: CallKeys | None
) -> tuple[ChatRequest, CacheKeys | None]:
    """The request the cache files ``ctx``'s answer under, and its keys: the opening
    lookup's (``keyed``) while the call still asks that (:meth:`CallKeys.fit`: a budget that
    lowered ``max_tokens`` too), else the request it has now (its keys computed again)."""
    if keyed is not None and keyed.fit(ctx, stages):
        return keyed.request, keyed.keys
    return cache_request(ctx, stages), None


def stale_response(
    ctx: CallContext, stages: Stages, keyed: CallKeys | None = None
) -> ChatResponse | None:
    """A fresh or expired cached answer (within the cache's ``stale_ttl``), for a call the
    routes could not serve (stale-if-error), looked up as :func:`keyed_request` files it;
    None without one."""
    if stages.cache is None:
        return None
    request, keys = keyed_request(ctx, stages, keyed)
    hit = stages.cache.lookup_stale(
        request,
        ctx.scope,
        tags=ctx.cache_tags,
        cacheable=ctx.cacheable,
        keys=keys,
        deadline=ctx.deadline,
        refresh=ctx.cache_refresh,
    )
    if hit is None:
        return None
    response = from_cache(ctx, hit)
    errors = route_error_types(ctx)
    return response.model_copy(update={"metadata": {**response.metadata, "route_errors": errors}})


def degraded_response(
    ctx: CallContext, stages: Stages, *, stale: bool = True, keyed: CallKeys | None = None
) -> ChatResponse | None:
    """When no route could serve the call: a stale cached answer (stale-if-error; ``stale``
    False: already looked up; ``keyed``: see :func:`stale_response`), else the configured
    degraded answer, else None."""
    found = stale_response(ctx, stages, keyed) if stale else None
    if found is not None:
        return found
    if stages.degraded_text is None:
        return None
    ctx.route = DEGRADED
    return ChatResponse(
        text=stages.degraded_text,
        finish_reason=DEGRADED,
        usage=Usage(),
        route=DEGRADED,
        metadata={
            "degraded": True,
            "route_errors": route_error_types(ctx),
        },
    )
