"""A call's start and end: the configured stages, the request checked and its context made
(:func:`preparing`), the answer stamped and filtered (:func:`finish`), the call reported to
telemetry and hooks (:func:`report`)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._copies import frozen, updated
from .._ids import IDEMPOTENCY_PREFIX, UniqueIds
from .._route_names import CACHE, DEGRADED
from ..breaker import Breakers
from ..budget.control import SpendControl
from ..cache._config import check_scope
from ..cache._served import hit_id, hit_metadata
from ..cache.entry import CacheHit
from ..context import CallContext, CallEvent, Hook, Scope, current_scope, emit
from ..errors import (
    ConfigurationError,
    InputTooLargeError,
    ProviderError,
    RequestValidationError,
)
from ..models import ChatRequest, ChatResponse, Timings, Usage, validate_request
from ..providers.base import Provider
from ..ratelimit import MemoryRateLimiter, RedisRateLimiter
from ..retry.budget import RetryBudget
from ..retry.policy import RetryPolicy
from ..telemetry._attributes import exception_type
from ..tokens import count_text_tokens, request_tokens_at_most
from . import filters
from .probes import Prober
from .routing import Routing

if TYPE_CHECKING:
    from ..cache import ResponseCache
    from ..releases.control import ReleaseControl
    from ..telemetry import Telemetry
    from .tasks import TaskRouting

__all__ = [
    "CACHE",
    "DEGRADED",
    "InputFilter",
    "Outcome",
    "OutputFilter",
    "Stages",
    "cache_model",
    "cache_request",
    "check_input_size",
    "afinish",
    "finish",
    "from_cache",
    "new_idempotency_key",
    "preparing",
    "report",
    "reporting",
    "resolve_scope",
    "route_error_types",
]


logger = logging.getLogger("llmguard_sdk")


CallKind = Literal["chat", "stream", "protect"]
"""What kind of call an event describes."""

InputFilter = Callable[[ChatRequest], "ChatRequest | Awaitable[ChatRequest | None] | None"]
"""Sees the validated request; returns a replacement request, or ``None`` to keep it.

Raise :class:`~llmguard_sdk.errors.GuardrailRejectedError` to refuse the call. It may be
``async def`` (or return an awaitable): awaited on the caller's event loop in async calls,
run on an event loop of its own in a worker thread in sync calls; its wait is bounded by the
call's deadline (past it: :class:`~llmguard_sdk.errors.ProviderTimeoutError`)."""


OutputFilter = Callable[[ChatResponse], "ChatResponse | Awaitable[ChatResponse | None] | None"]
"""Sees the response; returns a replacement, or ``None`` to keep it (async as an
:data:`InputFilter` may be); may raise
:class:`~llmguard_sdk.errors.GuardrailRejectedError`. For streams it sees the assembled
response after the last chunk (the caller has already read the text by then); a cached or
degraded answer, replayed as one chunk, is filtered before that chunk."""


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
    retry_budget: RetryBudget | None = None
    continue_streams: bool = False
    breakers: Breakers | None = None
    moves_on: Callable[[ProviderError], bool] | None = None
    degraded_text: str | None = None
    hedge_after: float | None = None
    # (the two limiters: the Guard calls their private steps, its arguments unchecked)
    limiter: MemoryRateLimiter | RedisRateLimiter | None = None
    spend: SpendControl | None = None  # spend budgets and costs (not the retry budget)
    cache: ResponseCache | None = None
    telemetry: Telemetry | None = None
    # the routes whose requests carry their trace context (None: telemetry's names as given)
    propagated: bool | frozenset[str] | None = None
    routing: Routing | None = None  # deployment groups ranked per call
    prober: Prober | None = None  # background probes of routes whose breaker is open
    tasks: TaskRouting | None = None  # task routing: each call's tier, cascades
    releases: ReleaseControl | None = None  # the release and arm of each call


_LONGEST_CALL_S = 2.0**31  # a longer timeout is "never": capped, so no OS timer overflows


def preparing(
    stages: Stages,
    request: ChatRequest | Mapping[str, Any],
    *,
    scope: Scope,
    timeout: float | None,
    hedge_after: float | None = None,
    attempt_timeout: float | None = None,
    priority: Literal["interactive", "batch"] = "interactive",
    region: str | None = None,
    started_at: tuple[float, int] | None = None,
) -> filters.Plan[CallContext]:
    """Validate the request, run input guardrails, choose the call's routes (a release's,
    a group's ranking, its tier's) and check its size as its first route counts; start the
    clock (or take ``started_at``, its ``time.monotonic()`` and ``time.time_ns()`` start).
    A plan (see :mod:`.filters`): it yields the waits of async input filters. A ``dict``
    request is the call's own (it is given the idempotency key in place)."""
    started, started_ns = started_at or (time.monotonic(), time.time_ns())
    if not stages.routes:
        raise ConfigurationError(
            "this Guard has no provider: pass providers=[...] or set LLMGUARD_BASE_URL"
        )
    total = stages.timeout if timeout is None else timeout
    if not _seconds(total) or total == 0:
        raise RequestValidationError(f"timeout must be a positive number of seconds, got {total!r}")
    deadline = started + min(total, _LONGEST_CALL_S)
    checked = yield from _checking(request, stages, deadline)
    if priority not in ("interactive", "batch"):
        raise RequestValidationError(f"priority must be 'interactive' or 'batch', got {priority!r}")
    if region is not None and not (isinstance(region, str) and region):
        raise RequestValidationError(f"region must be a non-empty string, got {region!r}")
    hedge = stages.hedge_after if hedge_after is None else hedge_after
    if hedge is not None and not _seconds(hedge):
        raise RequestValidationError(f"hedge_after must be seconds >= 0, got {hedge!r}")
    if attempt_timeout is None:
        attempt_timeout = stages.attempt_timeout
    elif not _seconds(attempt_timeout) or attempt_timeout == 0:
        raise RequestValidationError(
            f"attempt_timeout must be a positive number of seconds, got {attempt_timeout!r:.80}"
        )
    ctx = CallContext(
        request=checked,
        scope=scope,
        deadline=deadline,
        started=started,
        started_ns=started_ns,
        hedge_after=hedge,
        attempt_timeout=attempt_timeout,
        priority=priority,
        region=region,
        group=_selected_group(stages, checked),
    )
    if stages.telemetry is not None:
        ctx.trace_parent = stages.telemetry.parent()
    prices = stages.spend.prices if stages.spend is not None else None
    if stages.releases is not None:  # the call's release: its routes (ranked), prompt, ...
        stages.releases.assign(ctx, prices)
    elif stages.routing is not None:
        ctx.route_order = stages.routing.ranked(ctx, prices)
    if stages.tasks is not None:  # the call's tier: its routes, or a cascade's first
        ctx.count_input_for(_first_model(ctx, stages))  # a rule counts as the chain's first
        stages.tasks.assign(ctx, ctx.route_order or stages.routes)
    if stages.tasks is not None or stages.max_input_tokens is not None:
        check_input_size(ctx, stages)
    elif ctx.group is not None:  # counted as its first deployment's model counts, when asked
        ctx.count_input_for(_first_model(ctx, stages))
    return ctx


def _selected_group(stages: Stages, request: ChatRequest) -> str | None:
    """The deployment group the call's ``model=`` selects, where it selects one: the group
    of that name, else the group of the chain's first route whose own model it is, or that
    route itself outside groups (see :meth:`Routing.selected`); the call starts there (see
    :meth:`Routing.ranked`);
    ``None`` when it selects none, or the Guard routes by tasks (the call's tier decides).
    A name of no group that every route would ignore is refused (UnknownModelError), but
    under a release: its arms may name their groups otherwise, and a name one of them has
    is never refused by the other."""
    routing = stages.routing
    if routing is None or stages.tasks is not None:
        return None
    if stages.releases is None:
        routing.check_model(request.model, stages.routes)
    return routing.selected(request.model)


def check_input_size(ctx: CallContext, stages: Stages) -> None:
    """Count the call's input as the model of its first route counts it (its arm's under a
    canary, its tier's first route's with task routing: a cascade's later tier counts anew;
    a count taken already is kept when that model's encoding took it), and refuse a request
    above ``max_input_tokens`` (:class:`~llmguard_sdk.errors.InputTooLargeError`)."""
    ctx.count_input_for(_first_model(ctx, stages))
    most = stages.max_input_tokens  # (the request as sent: a release's prompt in)
    # counted only when a bound without encoding does not show that the request fits
    if most is not None and request_tokens_at_most(ctx.request) > most:
        count = ctx.input_tokens()
        if count.tokens > most:
            raise InputTooLargeError(count.tokens, most, estimated=count.estimated)


def _first_model(ctx: CallContext, stages: Stages) -> str | None:
    """The request's model, else the model of the call's first route (as ranked for it); a
    call whose model= names its group: its first deployment's own model (the name is no
    model's; one that named a deployment's model keeps it)."""
    first = (ctx.route_order or stages.routes)[0].model
    if ctx.group is not None and ctx.group == ctx.request.model and first:
        return first
    return ctx.request.model or first


def _seconds(value: object) -> bool:
    """Whether ``value`` is a finite number of seconds >= 0 (a bool is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf


_OUTPUT_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def _extra_body_problem(extra_body: Mapping[str, Any]) -> str | None:
    """Why ``extra_body`` may not be sent (it is sent over the request's own fields), if so:
    the keys that would change the answer's format, how many choices are billed, the output
    limit or the model that budgets and rate limits hold and price the call at."""
    if "stream" in extra_body:  # (the answer's format is ours)
        return "extra_body may not set 'stream': pass stream=True to Guard.chat for a stream"
    if extra_body.get("n", 1) != 1:
        return (
            "extra_body may not set 'n' (but to 1): the Guard returns one choice per call, and "
            "every choice asked for is billed"
        )
    for key in _OUTPUT_LIMITS:
        if key in extra_body:
            return (
                f"extra_body may not set {key!r}: pass max_tokens=... (or "
                "max_completion_tokens=...) to Guard.chat, which budgets and rate limits count"
            )
    if "model" in extra_body:
        return (
            "extra_body may not set 'model': a route sends its own model, else the call's "
            "model=..., and its calls are held and priced at that one"
        )
    return None


def _checking(
    request: ChatRequest | Mapping[str, Any], stages: Stages, deadline: float
) -> filters.Plan[ChatRequest]:
    """The request validated, through the input filters, with the call's idempotency key."""
    keyed = False
    if not isinstance(request, ChatRequest):
        if type(request) is not dict:  # (a dict is the call's own: call_context's)
            request = dict(request)
        keyed = _keyed(request, stages.retry)
    checked = validated = validate_request(request)
    if stages.input_filters:
        checked = yield from filters.inputs(stages.input_filters, checked, deadline)
    problem = _extra_body_problem(checked.extra_body) if checked.extra_body else None
    if problem is not None:
        raise RequestValidationError(problem)
    if checked.model is None and any(route.model is None for route in stages.routes):
        raise RequestValidationError("no model: pass model=... or give every provider a model")
    if not keyed or checked is not validated:  # (a filter's new request may lack the key)
        checked = _with_idempotency_key(checked, stages.retry)
    return checked


def resolve_scope(tenant: str | None, feature: str | None, user: str | None) -> Scope:
    """The call's scope: explicit keywords over the enclosing :func:`scoped` block (ids that
    are not strings: :class:`~llmguard_sdk.errors.RequestValidationError`). The last one
    made is remembered (a frozen Scope): a call like the last makes none."""
    global _last_scope
    asked = (current_scope(), tenant, feature, user)
    last = _last_scope
    if last[0] == asked:  # (ids equal to the remembered ones: exact strings or None)
        return last[1]
    scope = asked[0].merged(tenant, feature, user)
    check_scope(scope)
    ids = (scope.tenant, scope.feature, scope.user)
    if all(type(i) is str or i is None for i in ids):  # (a str subclass, an enum say, equals
        _last_scope = (asked, scope)  # its value: another call's ids would come back)
    return scope


_last_scope: tuple[tuple[Scope, object, object, object], Scope] = (
    (Scope(), None, None, None),
    Scope(),
)


def finish(ctx: CallContext, stages: Stages, response: ChatResponse) -> ChatResponse:
    """The answer served: stamped (route, attempts, timings, usage and cost), then through
    the output filters (an async one's wait in a worker thread, until the deadline)."""
    stamped = _stamp(ctx, stages, response)
    return filters.run(_screen(ctx, stages, stamped)) if stages.output_filters else stamped


async def afinish(ctx: CallContext, stages: Stages, response: ChatResponse) -> ChatResponse:
    """Async twin of :func:`finish` (an async filter awaited on the caller's loop)."""
    stamped = _stamp(ctx, stages, response)
    if not stages.output_filters:
        return stamped
    return await filters.arun(_screen(ctx, stages, stamped))


def _stamp(ctx: CallContext, stages: Stages, response: ChatResponse) -> ChatResponse:
    """Stamp route, attempts, timings and (estimated when missing) usage and cost. A route's
    answer carries a usage already, its provider's or the
    count its rate limit settled to (:func:`~.limits.with_usage`): the call is priced from
    the same count."""
    usage = response.usage
    if usage is None:  # (an answer no route gave: degraded, stale)
        usage = Usage(
            input_tokens=ctx.sent_input_tokens(),
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
            unserved = stages.spend.unserved_cost(ctx, stages)  # billed too: a hedge's loser...
            if unserved is not None:
                update["cost_usd"] += unserved
                update["cost_source"] = "estimated"
    return updated(response, update)


def _screen(ctx: CallContext, stages: Stages, stamped: ChatResponse) -> filters.Plan[ChatResponse]:
    """A stamped answer (:func:`_stamp`) through the output filters. The cache keeps answers
    as served (what the filters left: a redacting filter's words never reach the store), and
    a hit passes the filters of the Guard serving it again (a Guard whose filters refuse what
    another stored refuses the hit)."""
    try:
        return (yield from filters.outputs(stages.output_filters, stamped, ctx.deadline))
    except BaseException:  # refused (or out of time) after the provider billed it: unserved
        if stamped.route not in (None, CACHE, DEGRADED) and stamped.usage is not None:
            ctx.unserved.append((stamped.route, stamped.usage))
        raise


def _event(
    ctx: CallContext,
    kind: CallKind,
    response: ChatResponse | None,
    error: BaseException | None,
    cancelled: bool,
) -> CallEvent:
    """The :class:`CallEvent` describing a finished call."""
    outcome: Literal["ok", "error", "cancelled"] = (
        "error" if error is not None else "cancelled" if cancelled else "ok"
    )
    first_token = None if ctx.first_token_at is None else ctx.first_token_at - ctx.started
    charged = ctx.unserved_usd  # no answer: what its attempts that went out cost (estimated)
    return frozen(  # every field of CallEvent, named as its constructor names them
        CallEvent,
        {
            "kind": kind,
            "outcome": outcome,
            "scope": ctx.scope,
            "model": (response.model if response else None) or ctx.request.model,
            "route": ctx.route if error is None else None,
            "attempts": ctx.attempts,
            "latency_s": ctx.elapsed(),
            "first_token_s": first_token,
            "usage": response.usage if response else None,
            "error": error,
            "route_errors": tuple(route_error_types(ctx).items()),
            "retries": tuple(ctx.retries),
            "cost_usd": response.cost_usd if response else charged,
            "cost_source": response.cost_source if response else _estimated(charged),
            "provider": None,  # (a protected function's SDK; a Guard's routes have names)
        },
    )


def route_error_types(ctx: CallContext) -> dict[str, str]:
    """Each failed route's error, named by its fully qualified class name as its span's
    ``error.type`` names it: a :class:`CallEvent`'s ``route_errors`` and a degraded or
    stale answer's ``metadata["route_errors"]``."""
    return {name: exception_type(e) for name, e in ctx.route_errors.items()}


def _estimated(usd: float | None) -> Literal["estimated"] | None:
    return None if usd is None else "estimated"


def report(
    ctx: CallContext,
    stages: Stages,
    kind: CallKind,
    *,
    response: ChatResponse | None = None,
    error: BaseException | None = None,
    cancelled: bool = False,
) -> None:
    """The end of a call: export its telemetry, then give its :class:`CallEvent` to the
    hooks. Neither can break the call."""
    if response is None and stages.spend is not None:  # what its budgets charged it
        ctx.unserved_usd = stages.spend.charged_unanswered(ctx, stages)
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
    if stages.releases is not None:
        try:
            stages.releases.observe(ctx, response, error, cancelled)
        except Exception:
            logger.exception("llmguard releases failed")
    if stages.hooks:
        emit(stages.hooks, _event(ctx, kind, response, error, cancelled))


class Outcome:
    """What :func:`reporting` reports: the response served, once there is one."""

    __slots__ = ("response",)

    def __init__(self) -> None:
        self.response: ChatResponse | None = None

    def served(self, response: ChatResponse) -> ChatResponse:
        """Note ``response`` as the call's answer and hand it on."""
        self.response = response
        return response


class reporting:
    """:func:`report` the call run in the ``with`` block once it ends: its response, its
    error, or (interrupted, an async call cancelled) that it was cancelled. (A class, not a
    generator: it is on every call's path.)"""

    __slots__ = ("_ctx", "_kind", "_outcome", "_stages")

    def __init__(self, ctx: CallContext, stages: Stages, kind: CallKind) -> None:
        self._ctx, self._stages, self._kind = ctx, stages, kind
        self._outcome = Outcome()

    def __enter__(self) -> Outcome:
        return self._outcome

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: Any
    ) -> None:
        if error is None:
            report(self._ctx, self._stages, self._kind, response=self._outcome.response)
        elif isinstance(error, Exception):
            report(self._ctx, self._stages, self._kind, error=error)
        else:
            report(self._ctx, self._stages, self._kind, cancelled=True)


def _with_idempotency_key(request: ChatRequest, policy: RetryPolicy | None) -> ChatRequest:
    """Give the call one key, sent unchanged on every attempt (unless the caller set one)."""
    header = policy.idempotency_header if policy is not None else None
    if header is None:
        return request
    headers = request.extra_headers or {}
    if any(name.lower() == header.lower() for name in headers):
        return request
    key = new_idempotency_key()
    return updated(request, {"extra_headers": {**headers, header: key}})


def _keyed(data: dict[str, Any], policy: RetryPolicy | None) -> bool:
    """Give the request's data the call's idempotency key when it has no headers of its own
    (validated with the rest, one copy fewer than :func:`_with_idempotency_key`'s); whether
    it did."""
    header = policy.idempotency_header if policy is not None else None
    if header is not None and data.get("extra_headers") is None:
        data["extra_headers"] = {header: new_idempotency_key()}
        return True
    return False


def new_idempotency_key() -> str:
    """A key no other call of any process uses (32 hex digits after the prefix)."""
    return _idempotency_keys.next()


_idempotency_keys = UniqueIds(IDEMPOTENCY_PREFIX)


def cache_model(ctx: CallContext, stages: Stages) -> str | None:
    """The model the cache keys a call under: the request's, else the first route's. With
    task routing, the first route of the call's tier (another tier's model answers other
    calls); a cascade's calls, whichever tier answered them, are keyed by the cascade (its
    answers passed its checks; a tier's own answers did not)."""
    if ctx.request.model is not None:
        return ctx.request.model
    task = ctx.task
    if task is not None and task.cascade_name is not None:
        return f"cascade:{task.cascade_name}"
    routes = ctx.route_order if task is not None and ctx.route_order else stages.routes
    return routes[0].model if routes else None


def cache_request(ctx: CallContext, stages: Stages) -> ChatRequest:
    """The request as the cache keys it: with the model the first route would use."""
    model = cache_model(ctx, stages)
    if model != ctx.request.model:
        return ctx.request.model_copy(update={"model": model})
    return ctx.request


def from_cache(ctx: CallContext, hit: CacheHit) -> ChatResponse:
    """A cached answer as this call's response: no tokens used, nothing spent (its
    ``cost_source`` says so: ``"cached"``, not the stored answer's), and an id of its own
    (:func:`~llmguard_sdk.cache._served.hit_id`; the stored answer's in
    ``metadata["cached_id"]``)."""
    ctx.route = CACHE
    cached = hit.response
    metadata = {**cached.metadata, **hit_metadata(hit), "cached_route": cached.route}
    update = {"route": CACHE, "usage": Usage(), "cost_usd": 0.0, "cost_source": "cached"}
    update["id"] = hit_id(cached.id)  # (each serving its own: the stored one in metadata)
    return cached.model_copy(update={**update, "metadata": metadata})
