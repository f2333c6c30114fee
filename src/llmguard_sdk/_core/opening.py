"""A call's two round trips to the shared state.

The decisions a call needs before its provider call are made together, one
:class:`~llmguard_sdk.store.Batch` (one Redis pipeline) by :func:`open_call`: the cache
lookup, the spend reservation, and the first route's breaker permit and rate-limit
reservation, taken ahead (:class:`Ahead`) on the bet that the cache misses and the budgets
have room. When an earlier stage says no (a cache hit, a budget refusal, an open breaker),
what was taken ahead is given back (one more round trip, off the happy path). What needs no
answer (breaker records, rate-limit settles, the retry budget's request count, the spend
settle, the cache store) waits in the call's :class:`Tail` and goes out together after the
provider call: two round trips per call when everything goes well, streams included. The cache
keys the lookup computed (:class:`CallKeys`) are kept for the store after a miss.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread

from .._state import bounds
from .._state.steps import Batch, Outcome, Step, start
from ..breaker import Breakers, MemoryBreakerBackend, Permit
from ..budget.control import Held
from ..budget.policy import BudgetEvent
from ..cache.entry import CacheHit, CacheOptions
from ..cache.keys import CacheKeys
from ..context import CallContext, Scope
from ..errors import ProviderError
from ..models import ChatRequest, ChatResponse
from ..ratelimit import Grant, MemoryRateLimiter, RateLimiter
from .limits import Reservation, reserve_steps, settle_args, token_reservation
from .routes import answers_cached, first_route, keyed_request
from .stages import CACHE, DEGRADED, Stages, cache_model, cache_request, from_cache

if TYPE_CHECKING:
    from ..cache import ResponseCache

__all__ = [
    "Ahead",
    "CallKeys",
    "OpeningOutcome",
    "Tail",
    "aopen_call",
    "first_route",
    "open_call",
]


logger = logging.getLogger("llmguard_sdk")


T = TypeVar("T")


class Tail:
    """What a call still has to tell the stages, sent together: decisions whose answer the
    call does not wait for (breaker records, rate-limit settles, the retry budget's request
    count, the spend settle, the cache store, and the give-backs of what was taken ahead).

    The chain adds to it as it goes; the next decision that needs an answer takes them
    along in its round trip (:meth:`flush` with it), and the Guard sends the rest after the
    call, in one round trip (``last``).

    ``deadline``: the call's (a :func:`time.monotonic` instant); its round trips wait for
    Redis no longer than it leaves them (:func:`~llmguard_sdk._state.bounds.ahead_of` while
    the call goes on, :func:`~llmguard_sdk._state.bounds.after` for the last).
    """

    def __init__(self, deadline: float | None = None) -> None:
        self.steps: list[Step[Any]] = []
        self.deadline = deadline

    def add(self, step: Step[Any]) -> None:
        """Send ``step`` with the next round trip (one that needs no round trip, such as a
        memory backend's, is done at once)."""
        ended, _, rest = start(step)
        if not ended:
            self.steps.append(rest)

    def _batch(self, more: tuple[Step[Any], ...], last: bool) -> Batch:
        deadline = self.deadline
        bound = bounds.after if last else bounds.ahead_of
        batch = Batch([*self.steps, *more], by=lambda: bound(deadline))
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

    def flush(self, *more: Step[Any], last: bool = False) -> list[Outcome]:
        """Send what waits, and ``more``, in one batch; the outcomes of ``more``. ``last``:
        the call has its answer (or its error), nothing waits for the batch but the caller."""
        if not self.steps and not more:
            return []
        batch = self._batch(more, last)
        return self._results(batch.run(), len(more))

    async def aflush(self, *more: Step[Any], last: bool = False) -> list[Outcome]:
        """Async twin of :meth:`flush` (its round trips are not cancelled half-way: see
        :meth:`~llmguard_sdk._state.steps.Batch.arun`)."""
        if not self.steps and not more:
            return []
        batch = self._batch(more, last)
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
            undo.append(stages.breakers.release_steps(self.route, permit.probe))
        if not self.grant_taken and self.reservation is not None and stages.limiter is not None:
            args = settle_args(self.reservation)
            if args is not None:
                if self.reservation.granted:  # (else asked, no answer: was it counted?)
                    args["request_delta"] = -1.0
                undo.append(stages.limiter._settle_steps(self.route, args))
        self.permit_taken = self.grant_taken = True
        return undo


@dataclass(frozen=True)
class CallKeys:
    """The cache keys a call's lookup computed, and what they were computed from: the call's
    request then (``source``, the context's), the request the cache keyed (``request``: with
    the first route's model when the call names none), the scope and the cache tags.

    The store after a miss, and the stale lookups when the routes fail, reuse them only
    while the call still asks that (:meth:`fit`). A request is frozen, so the same object is
    the same request; a stage that changes the request replaces it, and the store then keys
    the request it has. A spend budget that lowers the output limit (``max_tokens`` or
    ``max_completion_tokens``, in the opening batch or a retry's top-up) is the exception:
    an answer stored is one that finished within the lower bound, so it answers what the
    caller asked, under whose keys it is filed (the caller's next identical call hits it,
    and its stale-if-error lookup finds it).
    """

    source: ChatRequest
    request: ChatRequest
    scope: Scope
    tags: tuple[str, ...]
    keys: CacheKeys

    def fit(self, ctx: CallContext, stages: Stages) -> bool:
        """Whether ``ctx`` still asks what these keys were computed for."""
        return (
            (ctx.request is self.source or _clamped(ctx.request, self.source))
            and ctx.scope == self.scope
            and ctx.cache_tags == self.tags
            and cache_model(ctx, stages) == self.request.model
        )


def _clamped(request: ChatRequest, source: ChatRequest) -> bool:
    """Whether ``request`` is ``source`` with a lower output limit (``max_tokens``, or
    ``max_completion_tokens`` where the caller set it) and nothing else changed."""
    limit, asked = request.most_output, source.most_output
    lowered = limit is not None and (asked is None or limit < asked)
    asked_limits = {n: getattr(source, n) for n in ("max_tokens", "max_completion_tokens")}
    return lowered and request.model_copy(update=asked_limits) == source


@dataclass
class OpeningOutcome:
    """What the first round trip of a call decided (see :func:`open_call`); ``cache_keys``:
    the keys of its cache lookup, for the store after a miss."""

    tail: Tail
    cached: ChatResponse | None = None
    held: Held | None = None
    error: BaseException | None = None
    ahead: Ahead | None = None
    notes: list[BudgetEvent] = dataclasses.field(default_factory=list)
    cache_keys: CallKeys | None = None
    asked: list[Held] = dataclasses.field(default_factory=list)  # the spend hold, once asked

    def begin(self, ctx: CallContext, stages: Stages) -> ChatResponse | None:
        """Act on the decisions, in the stages' order: a stage's error is raised and a
        cached answer returned, each after what was taken for the call is queued to be
        given back; None: the call goes to the chain."""
        if self.error is not None or self.cached is not None:
            self.undo(ctx, stages)
            if self.error is not None:
                self._emit(stages)
                raise self.error
            # served from the cache, so neither refused nor moved; but what is told once (an
            # alert, an outage counted locally) was marked told by its reservation: told now
            self.notes = [
                n for n in self.notes if n.kind == "alert" or n.action == "counted_locally"
            ]
            self._emit(stages)
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

    def remember_later(self, ctx: CallContext, stages: Stages, response: ChatResponse) -> None:
        """Queue the cache store of a provider's answer in :attr:`tail` (a failure to store
        never fails the call), under the lookup's keys when the call still asks what was
        looked up (:meth:`CallKeys.fit`), else under the keys of the request it has now."""
        if stages.cache is None or not _answer_cached(ctx, stages, response.route):
            return
        request, keys = keyed_request(ctx, stages, self.cache_keys)
        options = CacheOptions(
            tags=ctx.cache_tags, cacheable=ctx.cacheable, keys=keys, deadline=ctx.deadline,
            ttl=ctx.cache_ttl,
        )  # fmt: skip
        try:
            entry = stages.cache.entry_for(request, response, ctx.scope, **options)
        except ProviderError as exc:  # the embedder's endpoint down, or out of time
            logger.warning("response cache: an answer not stored, the embedder failed: %s", exc)
            return
        except Exception:
            logger.exception("response cache: storing an answer failed")
            return
        if entry is not None:
            self.tail.add(_logged(stages.cache.put_steps(entry, ctx.deadline)))

    async def aremember_later(
        self, ctx: CallContext, stages: Stages, response: ChatResponse
    ) -> None:
        """Async twin of :meth:`remember_later` (the embedding runs in a worker thread)."""
        if stages.cache is None or not _answer_cached(ctx, stages, response.route):
            return
        await anyio.to_thread.run_sync(lambda: self.remember_later(ctx, stages, response))


def _answer_cached(ctx: CallContext, stages: Stages, served_by: str) -> bool:
    """Whether the response cache keeps the answer of the route named ``served_by``: as the
    route declares (``cache_answers``); undeclared, unless it is a local route that stood in
    for a remote one (see :mod:`llmguard_sdk.providers.base`). Answers from the cache and
    degraded ones are never stored again."""
    if served_by in (CACHE, DEGRADED):
        return False
    route = next((route for route in stages.routes if route.name == served_by), None)
    return route is None or answers_cached(ctx, stages, route)


def _shared(stage: Breakers | RateLimiter | None) -> bool:
    """Whether ``stage`` keeps its state outside this process (in-process state gains
    nothing from being asked ahead; every backend has steps, so the memory ones are named)."""
    backend = stage.backend if isinstance(stage, Breakers) else stage
    return backend is not None and not isinstance(
        backend, (MemoryBreakerBackend, MemoryRateLimiter)
    )


def _opening(ctx: CallContext, stages: Stages) -> tuple[Batch, dict[str, int], OpeningOutcome]:
    spend = stages.spend if stages.spend is not None and stages.spend.active else None
    if spend is not None:
        spend.prepare(ctx)  # the cache and the rate limit see the request the provider gets
    deadline = ctx.deadline  # (its round trips leave the provider its share of it)
    batch = Batch(by=lambda: bounds.ahead_of(deadline))
    where: dict[str, int] = {}
    opened = OpeningOutcome(Tail(deadline))
    cache = stages.cache
    if cache is not None:
        batch.add(cache.sync_steps(ctx.deadline))
        where["cache"] = batch.add(_lookup_steps(ctx, stages, cache, opened))
    if spend is not None:
        where["spend"] = batch.add(spend.reserve_steps(ctx, stages, opened.notes, opened.asked))
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


def _lookup_steps(
    ctx: CallContext, stages: Stages, cache: ResponseCache, opened: OpeningOutcome
) -> Step[CacheHit | None]:
    """The cache lookup of the call's request as it is now (its keys are computed when the
    batch runs, a failure is the lookup's outcome); the keys are kept in ``opened``."""
    source, request = ctx.request, cache_request(ctx, stages)
    scope, tags, cacheable = ctx.scope, ctx.cache_tags, ctx.cacheable

    def lookup() -> Step[CacheHit | None]:
        keys = cache.call_keys(request, scope, tags=tags, cacheable=cacheable)
        if keys is not None:
            opened.cache_keys = CallKeys(source, request, scope, tags, keys)
        ctx.cache_skipped = keys is None or ctx.cache_refresh  # (telemetry: "skipped")
        hit: CacheHit | None = yield from cache.lookup_steps(
            request, scope, tags=tags, cacheable=cacheable, keys=keys, deadline=ctx.deadline,
            refresh=ctx.cache_refresh, max_age=ctx.cache_max_age,
        )  # fmt: skip
        return hit

    return lookup()


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
            opened.cached = from_cache(ctx, outcomes[index].value)
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
    return _opened(ctx, where, batch.run(), opened) if len(batch) else opened


async def aopen_call(ctx: CallContext, stages: Stages) -> OpeningOutcome:
    """Async twin of :func:`open_call` (its round trips are not cancelled half-way: what a
    round trip took is then known, so a cancelled call gives it back)."""
    batch, where, opened = _opening(ctx, stages)
    if not len(batch):
        return opened
    try:
        outcomes = await batch.arun()
    except BaseException:  # cancelled while a step waited (for a concurrency slot, say)
        await _give_back_ended(ctx, stages, where, batch, opened)
        raise
    return _opened(ctx, where, outcomes, opened)


async def _give_back_ended(
    ctx: CallContext, stages: Stages, where: dict[str, int], batch: Batch, opened: OpeningOutcome
) -> None:
    """Give back now what the steps of a batch cut short had taken when they ended (the
    spend hold, the permit, the rate-limit reservation made in an earlier round than the
    wait that was cancelled), and what the round trip cut short may have taken (the spend
    hold and the rate-limit lease asked, whose answer never came), instead of leaving it held
    until it expires."""
    _opened(ctx, where, batch.outcomes, opened)
    spend = batch.outcomes[where["spend"]] if "spend" in where else None
    if spend is not None and spend.value is None and spend.error is None and opened.asked:
        opened.held = opened.asked[-1]  # cut short before the answer: it may hold
    opened.undo(ctx, stages)
    try:
        with anyio.CancelScope(shield=True):  # (round trips bounded as after an answer)
            await opened.tail.aflush(last=True)
    except Exception:
        logger.exception("giving back what a cancelled call had taken failed")


def _logged(step: Step[Any]) -> Step[Any]:
    try:
        return (yield from step)
    except Exception:
        logger.exception("response cache: storing an answer failed")
        return False
