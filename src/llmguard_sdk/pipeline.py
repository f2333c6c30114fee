"""The pipeline's stages as small functions over a :class:`~llmguard_sdk.context.CallContext`.

The sync and async entry points of :class:`~llmguard_sdk.Guard` run the same stages in the
same order; only the provider I/O differs between them. Stages, outermost first::

    validate + input guardrails + size check + idempotency key      (prepare)
    -> cache lookup, spend reserve, first route's permit and rate-limit reserve  (open_call)
      -> for each route of the chain:
           retry( provider call )          (retry_after_failure, note_retry, fall_through)
    -> usage accounting + output guardrails                          (finish / failure)
    -> breaker records, rate-limit settles, spend settle, cache store (Tail)
    -> telemetry + hooks                                             (report)

Round trips: the decisions a call needs before its provider call are made together, one
:class:`~llmguard_sdk.store.Batch` (one Redis pipeline) by :func:`open_call`: the cache
lookup, the spend reservation, and the first route's breaker permit and rate-limit
reservation, taken ahead (:class:`Ahead`) on the bet that the cache misses and the budgets
have room. When an earlier stage says no (a cache hit, a budget refusal, an open breaker),
what was taken ahead is given back (one more round trip, off the happy path). What needs no
answer (breaker records, rate-limit settles, the retry budget's request count, the spend
settle, the cache store) waits in the call's :class:`Tail` and goes out together after the
provider call: two round trips per call when everything goes well. Streams do the same:
the opening batch before the provider call, the tail after the last chunk
(:mod:`llmguard_sdk.streaming`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio.to_thread

from .breaker import Breakers, Permit
from .budget.control import Held, SpendControl
from .budget.policy import BudgetEvent
from .cache import CacheHit, ResponseCache
from .context import CallContext, CallEvent, Hook, RetryDetails, Scope, current_scope, emit
from .errors import (
    AllRoutesFailedError,
    AuthenticationError,
    CircuitOpenError,
    ConfigurationError,
    ContextLengthExceededError,
    GuardrailRejectedError,
    InputTooLargeError,
    ProviderBusyError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitExceededError,
    RequestValidationError,
    StreamInterruptedError,
)
from .models import ChatRequest, ChatResponse, Message, Timings, Usage, validate_request
from .providers.base import Provider
from .providers.headers import rate_limit_reset_seconds
from .ratelimit import Grant, RateLimiter
from .retry.api import testing_attempts, testing_wait
from .retry.budget import RetryBudget
from .retry.policy import MIN_ATTEMPT_SECONDS, Decision, RetryPolicy, decide_for_error
from .store import Batch, Outcome, Step, delegate, start
from .telemetry import Telemetry
from .tokens import TokenCount, count_request_tokens, count_text_tokens

__all__ = ["Ahead", "Hook", "InputFilter", "OpeningOutcome", "OutputFilter", "Tail"]

logger = logging.getLogger("llmguard_sdk")

T = TypeVar("T")

_ROUTE_STATUSES = frozenset({402, 404})  # no credit here; this route lacks the model or path

InputFilter = Callable[[ChatRequest], "ChatRequest | None"]
"""Sees the validated request; returns a replacement request, or ``None`` to keep it.

Raise :class:`~llmguard_sdk.errors.GuardrailRejectedError` to refuse the call."""

OutputFilter = Callable[[ChatResponse], "ChatResponse | None"]
"""Sees the response; returns a replacement, or ``None`` to keep it; may raise
:class:`~llmguard_sdk.errors.GuardrailRejectedError`. For streams it sees the assembled
response after the last chunk (the caller has already read the text by then)."""


@dataclass(frozen=True)
class Stages:
    """The configured stages of one Guard (everything prepare and finish need)."""

    routes: tuple[Provider, ...]
    timeout: float
    attempt_timeout: float | None
    max_input_tokens: int | None
    input_filters: tuple[InputFilter, ...]
    output_filters: tuple[OutputFilter, ...]
    hooks: tuple[Hook, ...]
    retry: RetryPolicy | None = None
    budget: RetryBudget | None = None
    continue_streams: bool = False
    breakers: Breakers | None = None
    moves_on: Callable[[ProviderError], bool] | None = None
    degraded_text: str | None = None
    hedge_after: float | None = None
    limiter: RateLimiter | None = None
    spend: SpendControl | None = None  # spend budgets and costs (not the retry budget)
    cache: ResponseCache | None = None
    telemetry: Telemetry | None = None


def prepare(
    stages: Stages,
    request: ChatRequest | Mapping[str, Any],
    *,
    scope: Scope,
    timeout: float | None,
    hedge_after: float | None = None,
    priority: Literal["interactive", "batch"] = "interactive",
) -> CallContext:
    """Validate the request, run input guardrails and the size check; start the clock."""
    started, started_ns = time.monotonic(), time.time_ns()
    if not stages.routes:
        raise ConfigurationError(
            "this Guard has no provider: pass providers=[...] or set LLMGUARD_BASE_URL"
        )
    budget = stages.timeout if timeout is None else timeout
    if not (isinstance(budget, (int, float)) and 0 < budget < math.inf):
        raise RequestValidationError(
            f"timeout must be a positive number of seconds, got {budget!r}"
        )
    checked = validate_request(request if isinstance(request, ChatRequest) else dict(request))
    for input_filter in stages.input_filters:
        checked = _apply_filter(input_filter, checked, ChatRequest, "input")
    if checked.model is None and any(route.model is None for route in stages.routes):
        raise RequestValidationError("no model: pass model=... or give every provider a model")
    checked = _with_idempotency_key(checked, stages.retry)
    if priority not in ("interactive", "batch"):
        raise RequestValidationError(f"priority must be 'interactive' or 'batch', got {priority!r}")
    hedge = stages.hedge_after if hedge_after is None else hedge_after
    if hedge is not None and not (isinstance(hedge, (int, float)) and 0 <= hedge < math.inf):
        raise RequestValidationError(f"hedge_after must be seconds >= 0, got {hedge!r}")
    ctx = CallContext(
        request=checked,
        scope=scope,
        deadline=started + budget,
        started=started,
        started_ns=started_ns,
        hedge_after=hedge,
        priority=priority,
    )
    if stages.telemetry is not None:
        ctx.trace_parent = stages.telemetry.parent()
    if stages.max_input_tokens is not None:
        count = ctx.input_count = count_request_tokens(
            checked, model=checked.model or stages.routes[0].model
        )
        if count.tokens > stages.max_input_tokens:
            raise InputTooLargeError(
                count.tokens, stages.max_input_tokens, estimated=count.estimated
            )
    return ctx


def resolve_scope(tenant: str | None, feature: str | None, user: str | None) -> Scope:
    """The call's scope: explicit keywords over the enclosing :func:`scoped` block."""
    return current_scope().merged(tenant, feature, user)


def route_model(route: Provider, request: ChatRequest) -> str:
    """The model a route serves this request with: the route's own, else the request's."""
    model = route.model or request.model
    assert model is not None  # prepare() checked it
    return model


def attempt_deadline(ctx: CallContext, stages: Stages) -> float:
    """When one non-streaming attempt must end: the call's deadline or the attempt timeout."""
    if stages.attempt_timeout is None:
        return ctx.deadline
    return min(ctx.deadline, time.monotonic() + stages.attempt_timeout)


def retry_after_failure(
    ctx: CallContext,
    stages: Stages,
    error: ProviderError,
    *,
    attempt: int,
    previous_wait: float,
    delivered: bool = False,
) -> Decision:
    """Whether to retry the same route after ``error`` (before the retry budget is asked)."""
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
        remaining=ctx.remaining(),
        previous_wait=previous_wait,
        delivered=delivered,
    )


def still_fits(ctx: CallContext, decision: Decision) -> bool:
    """Whether the retry's wait still leaves the next attempt time (the budget took some)."""
    return decision.wait + MIN_ATTEMPT_SECONDS <= ctx.remaining()


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
        )
    )
    if ctx.attempt_log:
        ctx.attempt_log[-1].retry_wait = decision.wait
    return testing_wait(decision.wait)


def continuation_request(request: ChatRequest, partial_text: str) -> ChatRequest:
    """A request asking the next route to continue an answer that broke after ``partial_text``."""
    messages = [
        *request.messages,
        Message(role="assistant", content=partial_text),
        Message(role="user", content=CONTINUE_PROMPT),
    ]
    # A new body needs a new idempotency key, or the provider may answer with the old one.
    headers = {
        name: _new_idempotency_key() if value.startswith(IDEMPOTENCY_PREFIX) else value
        for name, value in (request.extra_headers or {}).items()
    }
    return request.model_copy(update={"messages": messages, "extra_headers": headers or None})


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
) -> None:
    """Record a route's failure, or re-raise it when the next route must not be tried.

    The chain moves on after errors that belong to the route: unavailable, timeouts, 429,
    malformed answers, bad credentials, no credit (402), an unknown model or path (404), a
    context window too small. It stops on a request the provider refused as wrong (400, 422
    ...), which would fail everywhere, and on a stream that already delivered text.
    ``moves_on`` replaces :func:`is_route_failure` when the Guard was given one.
    """
    ctx.route_errors[route.name] = error
    if delivered or isinstance(error, StreamInterruptedError):
        raise error
    if not (moves_on or is_route_failure)(error):
        raise error


def route_refused(ctx: CallContext, stages: Stages, route: Provider, permit: Permit) -> None:
    """Record that ``route``'s breaker refused the call (the chain moves on at once).

    When the breaker opened during this call's own retries, the provider error that opened
    it stays the one reported for the route.
    """
    retry_after = None if permit.retry_after == math.inf else permit.retry_after
    ctx.route_errors.setdefault(
        route.name, CircuitOpenError(route.name, permit.state, retry_after=retry_after)
    )


@dataclass
class Reservation:
    """One attempt's rate-limit reservation on a route: what it reserved (input tokens as
    counted for the route's model, output tokens as ``max_tokens``), its concurrency lease,
    and whether it has been settled (settling twice does nothing)."""

    route: str
    tenant: str | None
    input: float
    output: float
    estimated: bool = True
    lease: str | None = None
    granted: bool = False
    done: bool = False
    used: Usage | None = None  # what the call used, once known

    @property
    def tokens(self) -> float:
        """Input plus output tokens reserved."""
        return self.input + self.output


def route_input_tokens(ctx: CallContext, route: Provider) -> TokenCount:
    """The request's input tokens as ``route`` counts them: a local model with its own
    tokenizer (a ``count_tokens(request)`` method), else tiktoken with the encoding of the
    route's model (an estimate where that encoding is not available offline)."""
    counter = getattr(route, "count_tokens", None)
    if callable(counter):
        counted = counter(ctx.request)
        if isinstance(counted, int):
            return TokenCount(counted, estimated=False, method=f"{route.name} tokenizer")
    model = route.model or ctx.request.model
    if model is None or model == ctx.request.model:
        return ctx.input_tokens()
    count = ctx.route_counts.get(model)
    if count is None:
        count = ctx.route_counts[model] = count_request_tokens(ctx.request, model=model)
    return count


def token_reservation(ctx: CallContext, stages: Stages, route: Provider) -> Reservation | None:
    """What a call on ``route`` reserves (None: the route has no rate limit)."""
    limiter = stages.limiter
    rules = limiter.rules(route.name) if limiter is not None else ()
    if not rules:
        return None
    count = route_input_tokens(ctx, route)
    output = ctx.request.output_limit or max(limit.reserve_output_tokens for limit in rules)
    return Reservation(
        route.name, ctx.scope.tenant, float(count.tokens), float(output), count.estimated
    )


def rate_wait_allowed(ctx: CallContext) -> float:
    """How long a call may wait for a rate-limit slot: what its deadline leaves an attempt."""
    return max(0.0, ctx.remaining() - MIN_ATTEMPT_SECONDS)


_LEASE_GRACE_S = 5.0  # a concurrency lease outlives its call's deadline by this much at most


def reserve_args(
    ctx: CallContext, reservation: Reservation, *, wait: bool = True
) -> dict[str, Any]:
    """The limiter's ``reserve`` arguments for ``reservation`` (``wait=False``: no waiting,
    as for the second leg of a hedged call)."""
    return {
        "tenant": reservation.tenant,
        "input_tokens": reservation.input,
        "output_tokens": reservation.output,
        "priority": ctx.priority,
        "max_wait": rate_wait_allowed(ctx) if wait else 0.0,
        "lease_seconds": max(0.0, ctx.remaining()) + _LEASE_GRACE_S,
    }


def granted(reservation: Reservation, grant: Grant) -> None:
    """Note what the limiter granted (its lease)."""
    reservation.granted = grant.allowed
    reservation.lease = grant.lease


def reserve_steps(
    ctx: CallContext, stages: Stages, reservation: Reservation, *, wait: bool = True
) -> Step[Grant]:
    """The rate-limit reservation of one attempt as a step of a
    :class:`~llmguard_sdk.store.Batch` (what was granted is noted in ``reservation``)."""
    assert stages.limiter is not None
    grant: Grant = yield from delegate(
        stages.limiter, "reserve", reservation.route, **reserve_args(ctx, reservation, wait=wait)
    )
    granted(reservation, grant)
    return grant


def settle_args(reservation: Reservation, *, refund: bool = True) -> dict[str, Any] | None:
    """The limiter's ``settle`` arguments, once (None when already settled or never
    granted); marks the reservation settled.

    With its ``used`` usage known, the reservation is corrected to it. Without: ``refund``
    gives all the tokens back (nothing was generated), else only the lease goes back (the
    call was sent and its cost is unknown, so the reservation stands).
    """
    if not reservation.granted or reservation.done:
        return None
    reservation.done = True
    args: dict[str, Any] = {"tenant": reservation.tenant, "lease": reservation.lease}
    usage = reservation.used
    if usage is not None:
        args["input_delta"] = usage.input_tokens - reservation.input
        args["output_delta"] = usage.output_tokens - reservation.output
    elif refund:
        args["input_delta"] = -reservation.input
        args["output_delta"] = -reservation.output
    return args


def response_usage(ctx: CallContext, reservation: Reservation, response: ChatResponse) -> Usage:
    """What a call used: the provider's usage, else the SDK's own count of it."""
    if response.usage is not None:
        return response.usage
    output = count_text_tokens(response.text, reservation.route).tokens if response.text else 0
    return Usage(input_tokens=int(reservation.input), output_tokens=output, estimated=True)


_REMAINING = (
    (
        "remaining_requests",
        ("x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining"),
    ),
    ("remaining_tokens", ("x-ratelimit-remaining-tokens", "anthropic-ratelimit-tokens-remaining")),
    (
        "remaining_input_tokens",
        ("x-ratelimit-remaining-input-tokens", "anthropic-ratelimit-input-tokens-remaining"),
    ),
    (
        "remaining_output_tokens",
        ("x-ratelimit-remaining-output-tokens", "anthropic-ratelimit-output-tokens-remaining"),
    ),
)


def provider_counters(headers: Mapping[str, str]) -> dict[str, float]:
    """The provider's remaining counts in an answer's headers (``x-ratelimit-remaining-*``,
    Anthropic's ``anthropic-ratelimit-*-remaining``), keyed as the limiter's ``learn``
    takes them; empty when there are none."""
    lowered = {k.lower(): v for k, v in headers.items()}
    found: dict[str, float] = {}
    for name, header_names in _REMAINING:
        for header in header_names:
            raw = lowered.get(header)
            try:
                value = float(raw) if raw is not None else None
            except ValueError:
                value = None
            if value is not None and 0 <= value < math.inf:
                found[name] = value
                break
    return found


def learned(headers: Mapping[str, str]) -> dict[str, float] | None:
    """What an answer's headers teach the limiter (None: nothing). "None left, resets in
    N s" becomes a pause: the counters alone would let GCRA refill at once, while the
    provider's window stays full until its reset."""
    counters = provider_counters(headers)
    if not counters:
        return None
    if any(left < 1 for left in counters.values()):
        pause = rate_limit_reset_seconds(headers)
        if pause is not None and pause > 0:
            counters["pause"] = pause
    return counters


def used_tokens(ctx: CallContext, response: ChatResponse) -> float:
    """What a call really used (counted by the SDK when the provider did not say)."""
    if response.usage is not None:
        return float(response.usage.total_tokens)
    return float(ctx.input_tokens().tokens)


def route_rate_limited(ctx: CallContext, route: Provider, grant: Grant) -> None:
    """Record that the route's own rate limit had no room (the chain moves on at once)."""
    retry_after = None if grant.retry_after == math.inf else grant.retry_after
    why = {
        "never": "the call is larger than the limit allows at once",
        "concurrency": "every concurrency slot is taken",
        "queue": "the wait queue is full",
    }.get(grant.reason, "no room in time")
    ctx.route_errors.setdefault(
        route.name,
        RateLimitExceededError(
            f"no rate-limit room on route {route.name!r}: {why}",
            key=route.name,
            retry_after=retry_after,
        ),
    )


def too_small_for(ctx: CallContext, route: Provider) -> bool:
    """Skip a route whose known context window cannot hold the request (and say why)."""
    window = getattr(route, "context_window", None)
    if window is None:
        return False
    need = ctx.input_tokens().tokens + (ctx.request.output_limit or 0)
    if need <= window:
        return False
    ctx.route_errors[route.name] = ContextLengthExceededError(
        f"the request needs about {need} tokens; this route's context holds {window}",
        route=route.name,
        request_sent=False,
    )
    return True


def _cache_request(ctx: CallContext, stages: Stages) -> ChatRequest:
    """The request as the cache keys it: with the model the first route would use."""
    if ctx.request.model is None and stages.routes and stages.routes[0].model:
        return ctx.request.model_copy(update={"model": stages.routes[0].model})
    return ctx.request


def _from_cache(ctx: CallContext, hit: CacheHit) -> ChatResponse:
    """A cached answer as this call's response: no tokens used, nothing spent."""
    ctx.route = CACHE
    cached = hit.response
    metadata = {
        **cached.metadata,
        "cache": hit.kind,
        "similarity": round(hit.similarity, 4),
        "cached_route": cached.route,
    }
    return cached.model_copy(
        update={"route": CACHE, "usage": Usage(), "cost_usd": 0.0, "metadata": metadata}
    )


class Tail:
    """What a call still has to tell the stages, sent together: decisions whose answer the
    call does not wait for (breaker records, rate-limit settles, the retry budget's request
    count, the spend settle, the cache store, and the give-backs of what was taken ahead).

    The chain adds to it as it goes; the next decision that needs an answer takes them
    along in its round trip (:meth:`flush` with it), and the Guard sends the rest after the
    call, in one round trip.
    """

    def __init__(self) -> None:
        self.steps: list[Step[Any]] = []

    def add(self, step: Step[Any]) -> None:
        """Send ``step`` with the next round trip (one that needs no round trip, such as a
        memory backend's, is done at once)."""
        ended, _, rest = start(step)
        if not ended:
            self.steps.append(rest)

    def _batch(self, more: tuple[Step[Any], ...]) -> Batch:
        batch = Batch([*self.steps, *more])
        self.steps = []
        return batch

    def _results(self, outcomes: list[Outcome], more: int) -> list[Outcome]:
        pending = outcomes[: len(outcomes) - more]
        for outcome in pending:  # a deferred step's own failure (a bug): not swallowed
            if outcome.error is not None:
                raise outcome.error
        return outcomes[len(pending) :]

    def ask(self, step: Step[T]) -> T:
        """The answer of ``step``: decided in place when it needs no round trip, else in one
        round trip that takes what waits along."""
        ended, answer, rest = start(step)
        if ended:
            return answer  # type: ignore[no-any-return]
        (outcome,) = self.flush(rest)
        return outcome.result()  # type: ignore[no-any-return]

    async def aask(self, step: Step[T]) -> T:
        """Async twin of :meth:`ask`."""
        ended, answer, rest = start(step)
        if ended:
            return answer  # type: ignore[no-any-return]
        (outcome,) = await self.aflush(rest)
        return outcome.result()  # type: ignore[no-any-return]

    def flush(self, *more: Step[Any]) -> list[Outcome]:
        """Send what waits, and ``more``, in one batch; the outcomes of ``more``."""
        if not self.steps and not more:
            return []
        batch = self._batch(more)
        return self._results(batch.run(), len(more))

    async def aflush(self, *more: Step[Any]) -> list[Outcome]:
        """Async twin of :meth:`flush`."""
        if not self.steps and not more:
            return []
        batch = self._batch(more)
        return self._results(await batch.arun(), len(more))


@dataclass
class Ahead:
    """The first route's breaker permit and rate-limit reservation, taken in the call's
    first round trip (:func:`open_call`), before the chain asks for them. The chain's
    driver hands them over when the chain asks; :meth:`leftovers` gives back what it did
    not take (a cache hit, a refused budget, a route the breaker refused or left)."""

    route: str
    permit: Permit | None = None
    reservation: Reservation | None = None
    grant: Grant | None = None
    permit_taken: bool = False
    grant_taken: bool = False

    def take_permit(self) -> Permit | None:
        """The permit taken ahead, once."""
        if self.permit is None or self.permit_taken:
            return None
        self.permit_taken = True
        return self.permit

    def take_grant(self, reservation: Reservation | None) -> Grant | None:
        """The rate-limit grant taken ahead, once; ``reservation`` (the chain's) becomes the
        one reserved ahead."""
        if self.grant is None or self.grant_taken or reservation is None:
            return None
        assert self.reservation is not None
        self.grant_taken = True
        for name in ("input", "output", "estimated", "lease", "granted", "done", "used"):
            setattr(reservation, name, getattr(self.reservation, name))
        self.reservation = reservation
        return self.grant

    def leftovers(self, stages: Stages) -> list[Step[Any]]:
        """Steps that give back what was taken ahead and not handed over (once): the
        permit, and the reservation with its request (the call was never sent)."""
        undo: list[Step[Any]] = []
        permit = None if self.permit_taken else self.permit
        if permit is not None and permit.allowed and stages.breakers is not None:
            undo.append(stages.breakers.release_steps(self.route))
        if not self.grant_taken and self.reservation is not None and stages.limiter is not None:
            args = settle_args(self.reservation)
            if args is not None:
                args["request_delta"] = -1.0
                undo.append(delegate(stages.limiter, "settle", self.route, **args))
        self.permit_taken = self.grant_taken = True
        return undo


@dataclass
class OpeningOutcome:
    """What the first round trip of a call decided (see :func:`open_call`)."""

    tail: Tail
    cached: ChatResponse | None = None
    held: Held | None = None
    error: BaseException | None = None
    ahead: Ahead | None = None
    notes: list[BudgetEvent] = dataclasses.field(default_factory=list)

    def begin(self, ctx: CallContext, stages: Stages) -> ChatResponse | None:
        """Act on the decisions, in the stages' order: a stage's error is raised and a
        cached answer returned, each after what was taken for the call is queued to be
        given back; None: the call goes to the chain."""
        if self.error is not None or self.cached is not None:
            self.undo(ctx, stages)
            if self.error is not None:
                self._emit(stages)
                raise self.error
            return self.cached
        self._emit(stages)
        return None

    def undo(self, ctx: CallContext, stages: Stages) -> None:
        """Queue the give-back of the spend hold and of what was taken ahead."""
        if self.held is not None and stages.spend is not None:
            self.tail.add(stages.spend.settle_steps(self.held, ctx, None))
        if self.ahead is not None:
            for step in self.ahead.leftovers(stages):
                self.tail.add(step)

    def _emit(self, stages: Stages) -> None:
        if self.notes and stages.spend is not None:
            stages.spend.emit(self.notes)
            self.notes = []


def first_route(ctx: CallContext, stages: Stages) -> Provider | None:
    """The route the chain tries first (the first one whose context holds the request)."""
    return next((route for route in stages.routes if not too_small_for(ctx, route)), None)


def _shared(stage: Breakers | RateLimiter | None) -> bool:
    """Whether ``stage`` keeps its state in Redis (in-process state gains nothing from being
    asked ahead)."""
    if isinstance(stage, Breakers):
        return hasattr(stage.backend, "acquire_steps")
    return hasattr(stage, "reserve_steps")


def _opening(ctx: CallContext, stages: Stages) -> tuple[Batch, dict[str, int], OpeningOutcome]:
    spend = stages.spend if stages.spend is not None and stages.spend.active else None
    if spend is not None:
        spend.prepare(ctx)  # the cache and the rate limit see the request the provider gets
    batch = Batch()
    where: dict[str, int] = {}
    opened = OpeningOutcome(Tail())
    cache = stages.cache
    if cache is not None:
        batch.add(cache.sync_steps())
        where["cache"] = batch.add(
            cache.lookup_steps(
                _cache_request(ctx, stages), ctx.scope, tags=ctx.cache_tags, cacheable=ctx.cacheable
            )
        )
    if spend is not None:
        where["spend"] = batch.add(spend.reserve_steps(ctx, stages, opened.notes))
    breakers = stages.breakers if _shared(stages.breakers) else None
    limiter = stages.limiter if _shared(stages.limiter) else None
    route = first_route(ctx, stages) if breakers is not None or limiter is not None else None
    if route is not None:  # taken ahead only where it saves a round trip
        ahead = opened.ahead = Ahead(route.name)
        seen = "closed"
        if breakers is not None:
            where["permit"] = batch.add(breakers.permit_steps(route.name))
            seen = breakers.last_seen(route.name)
        reservation = token_reservation(ctx, stages, route) if limiter is not None else None
        if reservation is not None and seen not in ("open", "isolated"):
            ahead.reservation = reservation
            where["reserve"] = batch.add(reserve_steps(ctx, stages, reservation))
    return batch, where, opened


def _opened(
    ctx: CallContext, where: dict[str, int], outcomes: list[Outcome], opened: OpeningOutcome
) -> OpeningOutcome:
    for stage in ("cache", "spend", "permit", "reserve"):  # in the stages' order
        index = where.get(stage)
        if index is None:
            continue
        if outcomes[index].error is not None:
            opened.error = outcomes[index].error
            break
        if stage == "cache" and outcomes[index].value is not None:  # a hit outranks the rest
            opened.cached = _from_cache(ctx, outcomes[index].value)
            break
    if "spend" in where and outcomes[where["spend"]].error is None:
        opened.held = outcomes[where["spend"]].value
    ahead = opened.ahead
    if ahead is not None:
        if "permit" in where and outcomes[where["permit"]].error is None:
            ahead.permit = outcomes[where["permit"]].value
        if "reserve" in where and outcomes[where["reserve"]].error is None:
            ahead.grant = outcomes[where["reserve"]].value
    return opened


def open_call(ctx: CallContext, stages: Stages) -> OpeningOutcome:
    """The call's first round trip: cache lookup, spend reserve, and the first route's
    permit and rate-limit reservation, in one batch (see the module docs)."""
    batch, where, opened = _opening(ctx, stages)
    return _opened(ctx, where, batch.run() if len(batch) else [], opened)


async def aopen_call(ctx: CallContext, stages: Stages) -> OpeningOutcome:
    """Async twin of :func:`open_call`."""
    batch, where, opened = _opening(ctx, stages)
    return _opened(ctx, where, await batch.arun() if len(batch) else [], opened)


def _logged(step: Step[Any]) -> Step[Any]:
    try:
        return (yield from step)
    except Exception:
        logger.exception("response cache: storing an answer failed")
        return False


def remember_later(ctx: CallContext, stages: Stages, response: ChatResponse, tail: Tail) -> None:
    """Queue the cache store of a provider's answer in ``tail`` (a failure to store never
    fails the call)."""
    if stages.cache is None or response.route in (CACHE, DEGRADED):
        return
    try:
        entry = stages.cache.entry_for(
            _cache_request(ctx, stages),
            response,
            ctx.scope,
            tags=ctx.cache_tags,
            cacheable=ctx.cacheable,
        )
    except Exception:
        logger.exception("response cache: storing an answer failed")
        return
    if entry is not None:
        tail.add(_logged(stages.cache.put_steps(entry)))


async def aremember_later(
    ctx: CallContext, stages: Stages, response: ChatResponse, tail: Tail
) -> None:
    """Async twin of :func:`remember_later` (the embedding runs in a worker thread)."""
    if stages.cache is None or response.route in (CACHE, DEGRADED):
        return
    await anyio.to_thread.run_sync(lambda: remember_later(ctx, stages, response, tail))


def degraded_response(ctx: CallContext, stages: Stages) -> ChatResponse | None:
    """When no route could serve the call: a stale cached answer (stale-if-error), else the
    configured degraded answer, else None."""
    if stages.cache is not None:
        hit = stages.cache.lookup_stale(
            _cache_request(ctx, stages), ctx.scope, tags=ctx.cache_tags, cacheable=ctx.cacheable
        )
        if hit is not None:
            response = _from_cache(ctx, hit)
            errors = {name: type(e).__name__ for name, e in ctx.route_errors.items()}
            return response.model_copy(
                update={"metadata": {**response.metadata, "route_errors": errors}}
            )
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
            "route_errors": {name: type(e).__name__ for name, e in ctx.route_errors.items()},
        },
    )


DEGRADED = "degraded"
CACHE = "cache"
"""``route`` and ``finish_reason`` of a degraded answer."""


def is_route_failure(error: ProviderError) -> bool:
    """Whether ``error`` says something about the route rather than about the request."""
    return (
        error.retryable
        or isinstance(error, (AuthenticationError, ContextLengthExceededError, ProviderBusyError))
        or error.status_code in _ROUTE_STATUSES
    )


def failure(ctx: CallContext, stages: Stages) -> Exception:
    """The error to raise when no route served the call."""
    if len(stages.routes) == 1 and len(ctx.route_errors) == 1:
        (only,) = ctx.route_errors.values()
        if isinstance(only, Exception):
            return only
    return AllRoutesFailedError(ctx.route_errors)


def finish(ctx: CallContext, stages: Stages, response: ChatResponse) -> ChatResponse:
    """Stamp route, attempts, timings and (estimated when missing) usage; run output filters."""
    usage = response.usage
    if usage is None:
        usage = Usage(
            input_tokens=ctx.input_tokens().tokens,
            output_tokens=count_text_tokens(response.text, response.model or None).tokens,
            estimated=True,
        )
    first_token = None if ctx.first_token_at is None else ctx.first_token_at - ctx.started
    update: dict[str, Any] = {
        "route": ctx.route or response.route,
        "attempts": ctx.attempts,
        "usage": usage,
        "timings": Timings(total_s=ctx.elapsed(), first_token_s=first_token),
    }
    if stages.spend is not None:  # the provider's reported cost, else the price table's
        cost = stages.spend.cost(ctx, stages, response, usage)
        if cost is not None:
            update["cost_usd"], update["cost_source"] = cost.usd, cost.source
    response = response.model_copy(update=update)
    for output_filter in stages.output_filters:
        response = _apply_filter(output_filter, response, ChatResponse, "output")
    return response


def event(
    ctx: CallContext,
    kind: Literal["chat", "stream", "protect"],
    *,
    response: ChatResponse | None = None,
    error: BaseException | None = None,
    cancelled: bool = False,
) -> CallEvent:
    """The :class:`CallEvent` describing a finished call."""
    outcome: Literal["ok", "error", "cancelled"] = (
        "error" if error is not None else "cancelled" if cancelled else "ok"
    )
    first_token = None if ctx.first_token_at is None else ctx.first_token_at - ctx.started
    return CallEvent(
        kind=kind,
        outcome=outcome,
        scope=ctx.scope,
        model=(response.model if response else None) or ctx.request.model,
        route=ctx.route if error is None else None,
        attempts=ctx.attempts,
        latency_s=ctx.elapsed(),
        first_token_s=first_token,
        usage=response.usage if response else None,
        error=error,
        route_errors=tuple((name, type(e).__name__) for name, e in ctx.route_errors.items()),
        retries=tuple(ctx.retries),
        cost_usd=response.cost_usd if response else None,
        cost_source=response.cost_source if response else None,
    )


def report(
    ctx: CallContext,
    stages: Stages,
    kind: Literal["chat", "stream", "protect"],
    *,
    response: ChatResponse | None = None,
    error: BaseException | None = None,
    cancelled: bool = False,
) -> None:
    """The end of a call: export its telemetry, then give its :class:`CallEvent` to the
    hooks. Neither can break the call."""
    if stages.telemetry is not None:
        try:
            stages.telemetry.record(
                ctx,
                stages.routes,
                kind,
                response=response,
                error=error,
                cancelled=cancelled,
                cache_on=stages.cache is not None,
            )
        except Exception:
            logger.exception("llmguard telemetry failed")
    if stages.hooks:
        emit(stages.hooks, event(ctx, kind, response=response, error=error, cancelled=cancelled))


def _with_idempotency_key(request: ChatRequest, policy: RetryPolicy | None) -> ChatRequest:
    """Give the call one key, sent unchanged on every attempt (unless the caller set one)."""
    header = policy.idempotency_header if policy is not None else None
    if header is None:
        return request
    headers = request.extra_headers or {}
    if any(name.lower() == header.lower() for name in headers):
        return request
    key = _new_idempotency_key()
    return request.model_copy(update={"extra_headers": {**headers, header: key}})


IDEMPOTENCY_PREFIX = "llmguard-"


def _new_idempotency_key() -> str:
    return IDEMPOTENCY_PREFIX + os.urandom(16).hex()


def _apply_filter(fn: Callable[[Any], Any], value: Any, kind: type[Any], stage: str) -> Any:
    try:
        result = fn(value)
    except GuardrailRejectedError as exc:
        if not exc.stage:
            exc.stage = stage
        raise
    if result is None:
        return value
    if not isinstance(result, kind):
        raise ConfigurationError(
            f"{stage} filter {fn!r} returned {type(result).__name__}, "
            f"expected {kind.__name__} or None"
        )
    return result
