"""A call's rate-limit reservations: what an attempt reserves on a route (its input tokens
as the route counts them, ``max_tokens`` of output, a concurrency lease), how it settles to
what was used, and what the provider's own counters teach the limiter."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from .._state.steps import Step
from ..context import CallContext
from ..errors import MalformedResponseError, ProviderError, ProviderTimeoutError
from ..models import ChatRequest, ChatResponse, Usage
from ..providers.base import Provider
from ..providers.headers import limit_count, rate_limit_reset_seconds
from ..ratelimit import Grant, LearnArgs, SettleArgs
from ..ratelimit._rules import new_call_id
from ..retry.policy import MIN_ATTEMPT_SECONDS
from ..tokens import (
    TokenCount,
    count_request_tokens,
    count_text_tokens,
    counts_alike,
    recounted,
)

if TYPE_CHECKING:  # stages imports routing, which counts with route_input_tokens
    from .assembly import Assembler
    from .stages import Stages

__all__ = [
    "Reservation",
    "answer_model",
    "bills_prompt",
    "charge_stopped",
    "continued_input",
    "cut_off",
    "failed_once_sent",
    "granted",
    "learned",
    "provider_counters",
    "reserve_steps",
    "response_usage",
    "route_input_tokens",
    "sent_input",
    "settle_args",
    "token_reservation",
    "with_usage",
]


@dataclass
class Reservation:
    """One attempt's rate-limit reservation on a route: what it reserved (input tokens as
    counted for the route's model, output tokens as ``max_tokens``), its concurrency lease,
    and whether it has been settled (settling twice does nothing). ``asked``: its reserve
    went out and no answer came back yet (the lease it names may be held)."""

    route: str
    tenant: str | None
    input: float
    output: float
    estimated: bool = True
    lease: str | None = None
    granted: bool = False
    done: bool = False
    used: Usage | None = None  # what the call used, once known
    asked: bool = False

    @property
    def tokens(self) -> float:
        """Input plus output tokens reserved."""
        return self.input + self.output


def route_input_tokens(ctx: CallContext, route: Provider) -> TokenCount:
    """The request's input tokens as ``route`` counts them: a local model with its own
    tokenizer (a ``count_tokens(request)`` method), else tiktoken with the encoding of the
    route's model (an estimate where that encoding is not available offline): the call's
    count when that model counts alike, or its tokens when that encoding took them. Each
    count is taken once per call (a route's own tokenizer's too: a route's context window
    and its rate limit both ask)."""
    counter = getattr(route, "count_tokens", None)
    if not callable(counter):
        return _model_count(ctx, route)
    own = ctx.tokenizer_counts.get(route.name)  # tokenized once per call and route
    if own is None:
        counted = _tokens_of(counter(ctx.request))
        if counted is not None:
            own = TokenCount(counted, estimated=False, method=_tokenizer(route))
        else:  # (its tokenizer could not count this request: asked once, tiktoken counts)
            own = _model_count(ctx, route)
        ctx.tokenizer_counts[route.name] = own
    return own


def continued_input(ctx: CallContext, route: Provider) -> int:
    """The input tokens continuing an interrupted stream adds to the request (the text
    streamed, the prompt to go on; 0 before any) as ``route`` counts them, as it counts the
    request (:func:`route_input_tokens`): the call's figure where the route's model counts
    alike, else counted once per route and continuation."""
    continuation = ctx.continuation
    if continuation is None:
        return 0
    added = ctx.continued_counts.get(route.name)
    if added is None:
        added = _continued(ctx, route, continuation)
        ctx.continued_counts[route.name] = added
    return added


def _continued(ctx: CallContext, route: Provider, continuation: ChatRequest) -> int:
    count = route_input_tokens(ctx, route)
    counter = getattr(route, "count_tokens", None)
    if callable(counter) and count.method == _tokenizer(route):  # it counted the request
        counted = _tokens_of(counter(continuation))
        if counted is not None:
            return max(0, counted - count.tokens)
        count = _model_count(ctx, route)  # (not the continuation: tiktoken counts both)
    model = route.model or ctx.request.model
    if model is None or counts_alike(model, ctx.input_model or ctx.request.model):
        return ctx.continued_input
    return max(0, count_request_tokens(continuation, model=model).tokens - count.tokens)


def _tokenizer(route: Provider) -> str:
    """The method of a count a route's own tokenizer took."""
    return f"{route.name} tokenizer"


def _tokens_of(counted: object) -> int | None:
    """A tokenizer's answer as a count (None: it could not count)."""
    return counted if isinstance(counted, int) and not isinstance(counted, bool) else None


def _model_count(ctx: CallContext, route: Provider) -> TokenCount:
    """The request's input tokens as tiktoken counts them for ``route``'s model."""
    model = route.model or ctx.request.model
    if model is None or counts_alike(model, ctx.input_model or ctx.request.model):
        return ctx.input_tokens()  # the count the call's other stages use
    count = ctx.route_counts.get(model)
    if count is None:  # the call's count when taken with this model's encoding, else anew
        taken = ctx.input_count
        taken = recounted(taken, ctx.request, model) if taken is not None else None
        count = taken or count_request_tokens(ctx.request, model=model)
        ctx.route_counts[model] = count
    return count


def token_reservation(ctx: CallContext, stages: Stages, route: Provider) -> Reservation | None:
    """What a call on ``route`` reserves (None: the route has no rate limit)."""
    limiter = stages.limiter
    rules = limiter.rules(route.name) if limiter is not None else ()
    if not rules:
        return None
    count = route_input_tokens(ctx, route)
    output = ctx.request.most_output or max(limit.reserve_output_tokens for limit in rules)
    sent = count.tokens + continued_input(ctx, route)  # a continuation sends more
    return Reservation(route.name, ctx.scope.tenant, float(sent), float(output), count.estimated)


def sent_input(ctx: CallContext, route: Provider, reservation: Reservation | None) -> int:
    """The input tokens an attempt on ``route`` sent, as the route counts them (what it
    reserved, when it did; a continuation's part included)."""
    if reservation is not None:
        return int(reservation.input)
    return route_input_tokens(ctx, route).tokens + continued_input(ctx, route)


def answer_model(ctx: CallContext, route: Provider, answered: str | None) -> str | None:
    """The model whose tokenizer counts an answer's text: the one that answered (as the
    provider named it), else the route's, else the request's."""
    return answered or route.model or ctx.request.model


def cut_off(
    ctx: CallContext, route: Provider, reservation: Reservation | None, output: int = 0
) -> Usage:
    """Note an attempt cut off after its request was sent, before any content (a hedge
    race's loser, a call cancelled): the provider bills its prompt and the ``output`` it is
    known or estimated to have generated, so the call's spend counts them
    (``ctx.unserved``); returns what it used, for its rate-limit settle."""
    sent = sent_input(ctx, route, reservation)
    used = Usage(input_tokens=sent, output_tokens=output, estimated=True)
    ctx.unserved.append((route.name, used))
    return used


def bills_prompt(route: Provider, error: ProviderError) -> bool:
    """Whether ``route``'s provider bills the prompt of an attempt that failed with ``error``:
    it answered 200, so it took the request, and its stream then broke (dropped or cut,
    stalled past the deadline, ended empty: the provider's own error event names its
    failure's status instead, never billed); or the request was sent and no answer came in
    time (the deadline or ``attempt_timeout`` passed first). A provider's 408 or other error
    answer is not (it did not take the request), nor a request that never reached it
    (connection refused), nor a 200 that is malformed (an HTML page, no JSON: perhaps a
    proxy's, not the provider's), nor a 200 that is an error object (an error event, a
    router's error answer: it has a ``body``; one of a kind the SDK does not know keeps the
    status 200), nor a batch route's call (batch APIs bill completed requests only; a batch
    nobody waits for is cancelled)."""
    if getattr(route, "service_tier", None) == "batch":
        return False
    status = error.status_code
    said = error.body is not None  # (the provider's own word that it failed the request)
    took = status == 200 and not (said or isinstance(error, MalformedResponseError))
    waited = isinstance(error, ProviderTimeoutError) and error.request_sent
    return took or (waited and (status or 0) < 400)


def charge_stopped(
    ctx: CallContext,
    route: Provider,
    reservation: Reservation | None,
    shown: Assembler,
    failure: ProviderError | None,
) -> Usage | None:
    """Charge an attempt that did not end, a stream or a hedge race's leg (``ctx.unserved``,
    whoever continues the call), what its provider bills
    (:meth:`.assembly.Assembler.charged`): its prompt once the provider took it (``failure``
    None: closed or cancelled once sent; else :func:`bills_prompt`), what ``shown`` (its
    chunks, none for a plain call) delivered, the server-side tools it ran; its prompt as
    its provider reported it, where it did. Returns what it used, to settle its rate-limit
    reservation to (None: all tokens go back)."""
    billed = failure is None or bills_prompt(route, failure)
    model = answer_model(ctx, route, shown.model)
    used = shown.used(model, sent_input(ctx, route, reservation), billed)
    if used is not None and shown.charged(billed):
        ctx.unserved.append((route.name, used))
    return used


def failed_once_sent(
    ctx: CallContext, route: Provider, reservation: Reservation | None, error: ProviderError
) -> Usage | None:
    """Note a plain call's attempt that failed with ``error`` before any answer: where its
    provider bills the prompt (:func:`bills_prompt`) it is charged as one cut off
    (:func:`cut_off`). Returns what it used, to settle its rate-limit reservation to: its
    prompt there (the provider counts it against its rate limits too), else None (all
    tokens go back)."""
    return cut_off(ctx, route, reservation) if bills_prompt(route, error) else None


# the longest pause a provider's hint teaches a route's limits (a 429's Retry-After, a reset
# time): a bogus one (Retry-After: 1e9) would lock the route out for as long; after this a
# call goes out, and a limit still exhausted answers another 429 with its own hint
MAX_LEARNED_PAUSE_S = 3600.0
_LEASE_GRACE_S = 5.0  # a concurrency lease outlives its call's deadline by this much at most


def granted(reservation: Reservation, grant: Grant) -> None:
    """Note what the limiter granted (its lease)."""
    reservation.granted = grant.allowed
    reservation.lease = grant.lease
    reservation.asked = False


def reserve_steps(
    ctx: CallContext, stages: Stages, reservation: Reservation, *, wait: bool = True
) -> Step[Grant]:
    """The rate-limit reservation of one attempt as a step of a
    :class:`~llmguard_sdk._state.steps.Batch` (what was granted is noted in
    ``reservation``); ``wait=False``: no waiting for a slot, as for the second leg of a
    hedged call."""
    assert stages.limiter is not None
    remaining = ctx.remaining()  # a call may wait what its deadline leaves an attempt
    # named before it goes out: cut short before the answer, the call gives the lease back
    reservation.lease, reservation.asked = new_call_id(), True
    grant: Grant = yield from stages.limiter._reserve_steps(  # (its arguments: sound)
        reservation.route,
        {
            "tenant": reservation.tenant,
            "lease": reservation.lease,
            "input_tokens": reservation.input,
            "output_tokens": reservation.output,
            "priority": ctx.priority,
            "max_wait": max(0.0, remaining - MIN_ATTEMPT_SECONDS) if wait else 0.0,
            "lease_seconds": max(0.0, remaining) + _LEASE_GRACE_S,
        },
    )
    granted(reservation, grant)
    return grant


def settle_args(reservation: Reservation, *, refund: bool = True) -> SettleArgs | None:
    """The limiter's ``settle`` arguments, once (None when already settled or never
    granted); marks the reservation settled.

    With its ``used`` usage known, the reservation is corrected to it. Without: ``refund``
    gives all the tokens back (nothing was generated), else only the lease goes back (the
    call was sent and its cost is unknown, so the reservation stands). A reservation still
    ``asked`` (cut short before its answer) gives back only the lease it may hold.
    """
    if reservation.asked and not reservation.done and reservation.lease is not None:
        reservation.done = True
        return {"tenant": reservation.tenant, "lease": reservation.lease}
    if not reservation.granted or reservation.done:
        return None
    reservation.done = True
    args: SettleArgs = {"tenant": reservation.tenant, "lease": reservation.lease}
    usage = reservation.used
    if usage is not None:
        args["input_delta"] = usage.input_tokens - reservation.input
        args["output_delta"] = usage.output_tokens - reservation.output
    elif refund:
        args["input_delta"] = -reservation.input
        args["output_delta"] = -reservation.output
    return args


def response_usage(
    ctx: CallContext, route: Provider, reservation: Reservation | None, response: ChatResponse
) -> Usage:
    """What an answer of ``route`` used: the provider's usage, else the SDK's own count of
    it, the input as the route counts it (:func:`sent_input`), the text as the model that
    answered does. The rate limit settles to it and the call is priced from it: both count
    the call alike (:func:`with_usage`)."""
    if response.usage is not None:
        return response.usage
    text, model = response.text, answer_model(ctx, route, response.model)
    output = count_text_tokens(text, model).tokens if text else 0
    sent = sent_input(ctx, route, reservation)
    return Usage(input_tokens=sent, output_tokens=output, estimated=True)


def with_usage(response: ChatResponse, used: Usage | None) -> ChatResponse:
    """``response`` carrying ``used``, the usage its rate-limit reservation settled to, when
    its provider reported none: the call's cost is estimated from the same count (the
    finish's own estimate counted the request as the call counts it, not as the route
    does)."""
    if response.usage is not None or used is None:
        return response
    return response.model_copy(update={"usage": used})


_REMAINING = (  # the limiter's names for the provider's remaining counts, by limit kind
    ("requests", "remaining_requests"),
    ("tokens", "remaining_tokens"),
    ("input-tokens", "remaining_input_tokens"),
    ("output-tokens", "remaining_output_tokens"),
)


def provider_counters(headers: Mapping[str, str]) -> dict[str, float]:
    """The provider's remaining counts in an answer's headers (``x-ratelimit-remaining-*``,
    Anthropic's ``anthropic-ratelimit-*-remaining``), keyed as the limiter's ``learn``
    takes them; empty when there are none. Read as every count header is
    (:func:`~llmguard_sdk.providers.headers.limit_count`): ASCII digits, finite, >= 0; a
    garbage one (``0_0``, ``nan``, other scripts' digits) is left out, never learned."""
    found: dict[str, float] = {}
    if "ratelimit" not in " ".join(headers).lower():  # (every name looked for says so)
        return found
    lowered = {k.lower(): v for k, v in headers.items()}
    for kind, name in _REMAINING:
        value = limit_count(lowered, "remaining", kind)
        if value is not None:
            found[name] = value
    return found


def learned(headers: Mapping[str, str]) -> LearnArgs | None:
    """What an answer's headers teach the limiter (None: nothing). "None left, resets in
    N s" becomes a pause: the counters alone would let GCRA refill at once, while the
    provider's window stays full until its reset."""
    counters = provider_counters(headers)
    if not counters:
        return None
    if any(left < 1 for left in counters.values()):
        pause = rate_limit_reset_seconds(headers)
        if pause is not None and pause > 0:
            counters["pause"] = min(pause, MAX_LEARNED_PAUSE_S)
    return cast(LearnArgs, counters)
