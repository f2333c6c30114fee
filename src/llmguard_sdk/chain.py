"""The fallback chain for one non-streaming call, written once for sync and async.

:func:`plan` walks the routes (breaker permit, retries under the budget, fall-through) as a
generator that *yields* each piece of I/O it needs (an :class:`Op`) and receives the result.
:func:`run` performs those ops synchronously, :func:`arun` with ``await``: the decisions live
in one place, and neither twin wraps the other.

The drivers save round trips to the shared state: an op whose answer the plan does not use
(a breaker record, a rate-limit settle ...) waits in the call's
:class:`~llmguard_sdk.pipeline.Tail` and goes out with the next op that needs Redis (or
after the call), and the first route's permit and reservation may have been taken ahead,
in the call's first round trip (:class:`~llmguard_sdk.pipeline.Ahead`).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from . import pipeline
from .context import CallContext
from .errors import ProviderError, ProviderTimeoutError, RateLimitedError
from .models import ChatResponse
from .pipeline import Ahead, Reservation, Stages, Tail
from .providers.base import Provider
from .store import Step, delegate, done

__all__ = ["Op", "arun", "from_ahead", "plan", "run"]


@dataclass(frozen=True)
class Op:
    """One piece of I/O the chain needs: what, for which route, with which arguments."""

    kind: Literal[
        "record_request",
        "permit",
        "release",
        "reserve",
        "settle",
        "learn",
        "call",
        "record",
        "spend",
        "sleep",
        "hedge",
    ]
    route: Provider | None = None
    error: ProviderError | None = None
    seconds: float = 0.0
    hedge: Provider | None = None
    tokens: float = 0.0
    counters: tuple[float | None, float | None] = (None, None)
    reservation: Reservation | None = None  # the rate-limit reservation the op belongs to
    learned: dict[str, float] | None = None  # what the provider's counters taught


@dataclass
class HedgeResult:
    """How a hedged pair went: the winner and its answer, or each route's error."""

    winner: Provider | None = None
    response: ChatResponse | None = None
    errors: dict[str, ProviderError] = field(default_factory=dict)
    attempts: int = 1
    unexpected: BaseException | None = None  # not a provider failure: re-raised as it is


Plan = Generator[Op, Any, ChatResponse]


def plan(ctx: CallContext, stages: Stages) -> Plan:
    """Each route behind its breaker, with its retries; then the next; then degraded/failure.

    With ``hedge_after``, the first two usable routes are raced first (see :func:`_hedged`).
    """
    tried: set[str] = set()
    if ctx.hedge_after is not None:
        hedged = yield from _hedged(ctx, stages, ctx.hedge_after, tried)
        if hedged is not None:
            return hedged
    for route in stages.routes:
        if route.name in tried or pipeline.too_small_for(ctx, route):
            continue
        if stages.budget is not None:
            yield Op("record_request", route)
        attempt, previous_wait, previous = 0, 0.0, None
        while True:
            if stages.breakers is not None:
                permit = yield Op("permit", route)
                if not permit.allowed:
                    pipeline.route_refused(ctx, stages, route, permit)
                    break
            reservation = pipeline.token_reservation(ctx, stages, route)
            if reservation is not None:
                grant = yield Op("reserve", route, reservation=reservation)
                if not grant.allowed:
                    pipeline.route_rate_limited(ctx, route, grant)
                    if stages.breakers is not None:
                        yield Op("release", route)
                    break
                if grant.wait > 0:  # our slot lies a little ahead: wait for it
                    ctx.rate_wait_s += grant.wait
                    yield Op("sleep", seconds=grant.wait, reservation=reservation)
            attempt += 1
            ctx.attempts += 1
            started = time.monotonic()
            record = ctx.begin_attempt(route.name)
            try:
                response: ChatResponse = yield Op("call", route, reservation=reservation)
            except ProviderError as failure:
                record.end(failure)
                if reservation is not None:  # nothing was generated: give the tokens back
                    yield Op("settle", route, reservation=reservation)
                    if isinstance(failure, RateLimitedError):  # the provider says: no room
                        yield Op("learn", route, failure, seconds=failure.retry_after or 0.0)
                if stages.breakers is not None:
                    yield Op("record", route, failure, time.monotonic() - started)
                exc = previous = pipeline.real_error(failure, previous)
                decision = pipeline.retry_after_failure(
                    ctx, stages, exc, attempt=attempt, previous_wait=previous_wait
                )
                if (
                    decision.retry
                    and (stages.budget is None or (yield Op("spend", route)))
                    and pipeline.still_fits(ctx, decision)
                ):
                    wait = pipeline.note_retry(ctx, route, exc, attempt, decision)
                    yield Op("sleep", seconds=wait)
                    previous_wait = decision.wait
                    continue
                pipeline.fall_through(ctx, route, exc, delivered=False, moves_on=stages.moves_on)
                break
            record.end()
            if stages.breakers is not None:
                yield Op("record", route, None, time.monotonic() - started)
            if reservation is not None:
                reservation.used = pipeline.response_usage(ctx, reservation, response)
                yield Op("settle", route, reservation=reservation)
                taught = pipeline.learned(response.headers)
                if taught is not None:  # the provider's own counters correct ours
                    yield Op("learn", route, learned=taught)
            ctx.route = route.name
            return response
    degraded = pipeline.degraded_response(ctx, stages)
    if degraded is not None:
        return degraded
    raise pipeline.failure(ctx, stages)


def _hedged(
    ctx: CallContext, stages: Stages, delay: float, tried: set[str]
) -> Generator[Op, Any, ChatResponse | None]:
    """Race two routes: the first usable one its breaker lets through, and the next one, which
    starts when the first has not answered within ``delay`` (or failed in a way that moves
    the call on). The first answer wins; the other attempt is cancelled (async) or abandoned
    to its deadline (sync). A hedged pair is not retried; if both fail, the chain goes on.
    """
    usable = [r for r in stages.routes if not pipeline.too_small_for(ctx, r)]
    first: Provider | None = None
    reservation: Reservation | None = None
    for index, route in enumerate(usable[:-1]):
        if stages.breakers is not None:
            permit = yield Op("permit", route)
            if not permit.allowed:
                pipeline.route_refused(ctx, stages, route, permit)
                tried.add(route.name)
                continue
        reservation = pipeline.token_reservation(ctx, stages, route)
        if reservation is not None:  # the first leg is rate-limited like any attempt
            grant = yield Op("reserve", route, reservation=reservation)
            if not grant.allowed:
                pipeline.route_rate_limited(ctx, route, grant)
                if stages.breakers is not None:
                    yield Op("release", route)
                tried.add(route.name)
                continue
            if grant.wait > 0:
                ctx.rate_wait_s += grant.wait
                yield Op("sleep", seconds=grant.wait, reservation=reservation)
        first, second = route, usable[index + 1]
        break
    if first is None:
        return None
    result: HedgeResult = yield Op(
        "hedge", first, seconds=delay, hedge=second, reservation=reservation
    )
    if result.unexpected is not None:
        raise result.unexpected
    ctx.attempts += result.attempts
    for route in (first, second):
        if route.name in result.errors:
            tried.add(route.name)
    if result.winner is not None and result.response is not None:
        ctx.route_errors.update(result.errors)
        ctx.route = result.winner.name
        return result.response
    for route in (first, second):
        error = result.errors.get(route.name)
        if error is not None:
            pipeline.fall_through(ctx, route, error, delivered=False, moves_on=stages.moves_on)
    return None


def _moves_on(stages: Stages, error: ProviderError) -> bool:
    return (stages.moves_on or pipeline.is_route_failure)(error)


def _learned(op: Op) -> dict[str, float]:
    """What a "learn" op tells the limiter: a 429's pause, or the provider's counters."""
    if op.error is not None:
        return {"pause": op.seconds}
    return dict(op.learned or {})


_DEFERRED = frozenset({"record_request", "record", "settle", "learn", "release"})
"""Ops whose answer the plan does not use: they wait in the call's :class:`Tail` and go
out with the next round trip (the happy path's: after the provider call)."""


def _step(op: Op, ctx: CallContext, stages: Stages) -> Step[Any]:
    """The stage decision of a state op, as a step of a :class:`~llmguard_sdk.store.Batch`."""
    route = op.route
    assert route is not None
    if op.kind in ("permit", "release", "record"):
        breakers = stages.breakers
        assert breakers is not None
        if op.kind == "permit":
            return breakers.permit_steps(route.name)
        if op.kind == "release":
            return breakers.release_steps(route.name)
        return breakers.record_steps(route.name, op.error, seconds=op.seconds)
    if op.kind in ("reserve", "settle", "learn"):
        assert stages.limiter is not None
        if op.kind == "reserve":
            assert op.reservation is not None
            return pipeline.reserve_steps(ctx, stages, op.reservation)
        if op.kind == "learn":
            return delegate(stages.limiter, "learn", route.name, **_learned(op))
        assert op.reservation is not None
        args = pipeline.settle_args(op.reservation)
        return (
            done(None) if args is None else delegate(stages.limiter, "settle", route.name, **args)
        )
    assert stages.budget is not None
    if op.kind == "spend":
        return delegate(stages.budget, "try_spend", route.name)
    return delegate(stages.budget, "record_request", route.name)


def _give_back(stages: Stages, op: Op, tail: Tail) -> None:
    """An op ended without an outcome (cancelled, a bug): queue the give-back of its
    breaker permit (a call) and its rate-limit reservation. A call that may have reached
    the provider keeps its tokens; a wait gives them back."""
    if op.kind == "call" and op.route is not None and stages.breakers is not None:
        tail.add(stages.breakers.release_steps(op.route.name))
    reservation = op.reservation
    if reservation is None or stages.limiter is None:
        return
    args = pipeline.settle_args(reservation, refund=op.kind != "call")
    if args is not None:
        tail.add(delegate(stages.limiter, "settle", reservation.route, **args))


def from_ahead(op: Op, ahead: Ahead | None, stages: Stages, tail: Tail) -> tuple[bool, Any]:
    """(found, answer): the answer taken ahead for ``op``, if any. An op for another route
    means the plan left the first route: what it did not take is given back."""
    if ahead is None or op.route is None:
        return False, None
    if op.route.name != ahead.route:
        for step in ahead.leftovers(stages):
            tail.add(step)
        return False, None
    if op.kind == "permit":
        permit = ahead.take_permit()
        return permit is not None, permit
    if op.kind == "reserve":
        grant = ahead.take_grant(op.reservation)
        return grant is not None, grant
    return False, None


def run(
    ctx: CallContext, stages: Stages, *, ahead: Ahead | None = None, tail: Tail | None = None
) -> ChatResponse:
    """Carry out :func:`plan` with blocking I/O.

    ``ahead``: the first route's permit and reservation, taken in the call's first round
    trip; ``tail``: where decisions that need no answer wait (without one, they are sent
    before this returns).
    """
    own = tail is None
    queue_ = Tail() if tail is None else tail
    steps = plan(ctx, stages)
    result: Any = None
    error: ProviderError | None = None
    try:
        while True:
            try:
                op = steps.throw(error) if error is not None else steps.send(result)
            except StopIteration as finished:
                response: ChatResponse = finished.value
                return response
            result, error = None, None
            try:
                result = _perform(op, ctx, stages, ahead, queue_)
            except ProviderError as failure:
                error = failure
            except BaseException:
                _give_back(stages, op, queue_)
                raise
    finally:
        if ahead is not None:
            for step in ahead.leftovers(stages):
                queue_.add(step)
        if own:
            queue_.flush()


async def arun(
    ctx: CallContext, stages: Stages, *, ahead: Ahead | None = None, tail: Tail | None = None
) -> ChatResponse:
    """Carry out :func:`plan` with async I/O (see :func:`run`)."""
    own = tail is None
    queue_ = Tail() if tail is None else tail
    steps = plan(ctx, stages)
    result: Any = None
    error: ProviderError | None = None
    try:
        while True:
            try:
                op = steps.throw(error) if error is not None else steps.send(result)
            except StopIteration as finished:
                response: ChatResponse = finished.value
                return response
            result, error = None, None
            try:
                result = await _aperform(op, ctx, stages, ahead, queue_)
            except ProviderError as failure:
                error = failure
            except BaseException:  # cancelled, or not a provider failure
                _give_back(stages, op, queue_)
                raise
    finally:
        if ahead is not None:
            for step in ahead.leftovers(stages):
                queue_.add(step)
        if own:
            with anyio.CancelScope(shield=True):
                await queue_.aflush()


def _perform(op: Op, ctx: CallContext, stages: Stages, ahead: Ahead | None, tail: Tail) -> Any:
    found, answer = from_ahead(op, ahead, stages, tail)
    if found:
        return answer
    if op.kind in _DEFERRED:
        tail.add(_step(op, ctx, stages))
        return None
    route = op.route
    if op.kind == "sleep":
        tail.flush()
        time.sleep(op.seconds)
        return None
    if op.kind == "hedge":
        assert route is not None
        assert op.hedge is not None
        tail.flush()
        return _hedge_sync(ctx, stages, route, op.hedge, op.seconds, op.reservation)
    if op.kind == "call":
        assert route is not None
        return route.complete(
            ctx.request,
            model=pipeline.route_model(route, ctx.request),
            deadline=pipeline.attempt_deadline(ctx, stages),
        )
    return tail.ask(_step(op, ctx, stages))  # in place, or one round trip with what waits


async def _aperform(
    op: Op, ctx: CallContext, stages: Stages, ahead: Ahead | None, tail: Tail
) -> Any:
    found, answer = from_ahead(op, ahead, stages, tail)
    if found:
        return answer
    if op.kind in _DEFERRED:
        tail.add(_step(op, ctx, stages))
        return None
    route = op.route
    if op.kind == "sleep":
        await tail.aflush()
        await anyio.sleep(op.seconds)
        return None
    if op.kind == "hedge":
        assert route is not None
        assert op.hedge is not None
        await tail.aflush()
        return await _hedge_async(ctx, stages, route, op.hedge, op.seconds, op.reservation)
    if op.kind == "call":
        assert route is not None
        return await route.acomplete(
            ctx.request,
            model=pipeline.route_model(route, ctx.request),
            deadline=pipeline.attempt_deadline(ctx, stages),
        )
    return await tail.aask(_step(op, ctx, stages))


def _attempt(
    ctx: CallContext,
    stages: Stages,
    route: Provider,
    decided: threading.Event | None = None,
    reservation: Reservation | None = None,
) -> ChatResponse:
    """One sync attempt on ``route``, its outcome recorded by the route's breaker, unless a
    hedge race was ``decided`` without it: then its permit is only given back. Its
    rate-limit ``reservation`` is settled either way (a loser's tokens were spent too)."""
    started = time.monotonic()
    record = ctx.begin_attempt(route.name)
    try:
        response = route.complete(
            ctx.request,
            model=pipeline.route_model(route, ctx.request),
            deadline=pipeline.attempt_deadline(ctx, stages),
        )
    except ProviderError as error:
        record.end(error)
        _settle(stages, route, error, time.monotonic() - started, decided)
        _settle_limit(ctx, stages, reservation, error=error)
        raise
    except BaseException:
        if stages.breakers is not None:
            stages.breakers.release(route.name)
        _settle_limit(ctx, stages, reservation, sent=True)
        raise
    record.end()
    _settle(stages, route, None, time.monotonic() - started, decided)
    _settle_limit(ctx, stages, reservation, response=response)
    return response


def _limit_steps(
    ctx: CallContext,
    reservation: Reservation,
    *,
    response: ChatResponse | None = None,
    error: ProviderError | None = None,
    sent: bool = False,
) -> tuple[dict[str, Any] | None, dict[str, float] | None]:
    """(settle arguments, learn arguments) for a hedge leg's reservation: corrected to the
    usage of an answer, refunded after a failure (learning a 429's pause), or, for a call
    that ended without an outcome after being ``sent``, only its lease given back."""
    taught: dict[str, float] | None = None
    if response is not None:
        reservation.used = pipeline.response_usage(ctx, reservation, response)
        taught = pipeline.learned(response.headers)
    elif isinstance(error, RateLimitedError):
        taught = {"pause": error.retry_after or 0.0}
    return pipeline.settle_args(reservation, refund=not sent), taught


def _settle_limit(
    ctx: CallContext,
    stages: Stages,
    reservation: Reservation | None,
    **outcome: Any,
) -> None:
    if reservation is None or stages.limiter is None:
        return
    args, taught = _limit_steps(ctx, reservation, **outcome)
    if args is not None:
        stages.limiter.settle(reservation.route, **args)
    if taught is not None:
        stages.limiter.learn(reservation.route, **taught)


async def _asettle_limit(
    ctx: CallContext,
    stages: Stages,
    reservation: Reservation | None,
    **outcome: Any,
) -> None:
    if reservation is None or stages.limiter is None:
        return
    args, taught = _limit_steps(ctx, reservation, **outcome)
    with anyio.CancelScope(shield=True):  # also runs while a loser is being cancelled
        if args is not None:
            await stages.limiter.asettle(reservation.route, **args)
        if taught is not None:
            await stages.limiter.alearn(reservation.route, **taught)


def _settle(
    stages: Stages,
    route: Provider,
    error: ProviderError | None,
    seconds: float,
    decided: threading.Event | None,
) -> None:
    if stages.breakers is None:
        return
    if decided is not None and decided.is_set():
        stages.breakers.release(route.name)  # a hedge loser: its outcome is not evidence
    else:
        stages.breakers.record(route.name, error, seconds=seconds)


def _hedge_sync(
    ctx: CallContext,
    stages: Stages,
    first: Provider,
    second: Provider,
    delay: float,
    reservation: Reservation | None = None,
) -> HedgeResult:
    """The sync hedge: each attempt in its own thread; the loser is abandoned (it ends by the
    call's deadline, only gives its breaker permit back, and settles its rate-limit
    reservation when it ends)."""
    results: queue.SimpleQueue[tuple[Provider, ChatResponse | BaseException]] = queue.SimpleQueue()
    decided = threading.Event()
    reservations = {first.name: reservation}

    def attempt(route: Provider) -> None:
        leg = reservations.get(route.name)
        try:
            results.put((route, _attempt(ctx, stages, route, decided, leg)))
        except BaseException as error:  # handed to the caller, whatever it is
            results.put((route, error))

    def start(route: Provider) -> None:
        threading.Thread(target=attempt, args=(route,), daemon=True).start()

    outcome = HedgeResult()
    start(first)
    running: set[str] = {first.name}
    hedged = False
    while running:
        wait = min(delay if not hedged else math.inf, ctx.remaining())
        try:
            route, result = results.get(timeout=max(0.0, wait))
        except queue.Empty:
            if hedged or ctx.remaining() <= 0:
                break
            hedged = True
            if _start_hedge(ctx, stages, second, start, reservations):
                running.add(second.name)
                outcome.attempts += 1
            continue
        running.discard(route.name)
        if isinstance(result, ChatResponse):
            decided.set()
            outcome.winner, outcome.response = route, result
            return outcome
        if not isinstance(result, ProviderError):
            decided.set()
            outcome.unexpected = result
            return outcome
        outcome.errors[route.name] = result
        if not hedged and _moves_on(stages, result):  # failed early: start the second now
            hedged = True
            if _start_hedge(ctx, stages, second, start, reservations):
                running.add(second.name)
                outcome.attempts += 1
    decided.set()
    for name in running:  # still running at the deadline
        outcome.errors[name] = ProviderTimeoutError(
            "no answer before the call's deadline (hedged)", route=name
        )
    return outcome


def _start_hedge(
    ctx: CallContext,
    stages: Stages,
    second: Provider,
    start: Any,
    reservations: dict[str, Reservation | None],
) -> bool:
    """Start the second route if its breaker allows and its rate limit has room now (a
    hedge that waited for a slot would defeat its purpose)."""
    if stages.breakers is not None:
        permit = stages.breakers.permit(second.name)
        if not permit.allowed:
            pipeline.route_refused(ctx, stages, second, permit)
            return False
    leg = pipeline.token_reservation(ctx, stages, second)
    if leg is not None:
        assert stages.limiter is not None
        grant = stages.limiter.reserve(second.name, **pipeline.reserve_args(ctx, leg, wait=False))
        pipeline.granted(leg, grant)
        if not grant.allowed:
            pipeline.route_rate_limited(ctx, second, grant)
            if stages.breakers is not None:
                stages.breakers.release(second.name)
            return False
    reservations[second.name] = leg
    start(second)
    return True


async def _astart_hedge(
    ctx: CallContext, stages: Stages, second: Provider
) -> tuple[bool, Reservation | None]:
    """Async twin of :func:`_start_hedge`'s checks: (may start, its reservation)."""
    if stages.breakers is not None:
        permit = await stages.breakers.apermit(second.name)
        if not permit.allowed:
            pipeline.route_refused(ctx, stages, second, permit)
            return False, None
    leg = pipeline.token_reservation(ctx, stages, second)
    if leg is not None:
        assert stages.limiter is not None
        grant = await stages.limiter.areserve(
            second.name, **pipeline.reserve_args(ctx, leg, wait=False)
        )
        pipeline.granted(leg, grant)
        if not grant.allowed:
            pipeline.route_rate_limited(ctx, second, grant)
            if stages.breakers is not None:
                await stages.breakers.arelease(second.name)
            return False, None
    return True, leg


async def _hedge_async(
    ctx: CallContext,
    stages: Stages,
    first: Provider,
    second: Provider,
    delay: float,
    reservation: Reservation | None = None,
) -> HedgeResult:
    """The async hedge: both attempts in one task group; the loser is cancelled and gives its
    breaker permit and its concurrency lease back (its tokens stay reserved: it was sent)."""
    outcome = HedgeResult()
    settled = anyio.Event()
    running: set[str] = set()

    async def attempt(route: Provider, leg: Reservation | None) -> None:
        started = time.monotonic()
        record = ctx.begin_attempt(route.name)  # a cancelled loser stays open: "cancelled"
        try:
            response = await route.acomplete(
                ctx.request,
                model=pipeline.route_model(route, ctx.request),
                deadline=pipeline.attempt_deadline(ctx, stages),
            )
        except ProviderError as error:
            record.end(error)
            if stages.breakers is not None:
                await stages.breakers.arecord(route.name, error, seconds=time.monotonic() - started)
            await _asettle_limit(ctx, stages, leg, error=error)
            outcome.errors[route.name] = error
        except anyio.get_cancelled_exc_class():
            if stages.breakers is not None:
                await stages.breakers.arelease(route.name)  # cancelled: no outcome
            await _asettle_limit(ctx, stages, leg, sent=True)
            raise
        except Exception as error:  # not a provider failure: re-raised as it is
            if stages.breakers is not None:
                await stages.breakers.arelease(route.name)
            await _asettle_limit(ctx, stages, leg, sent=True)
            outcome.unexpected = error
        else:
            record.end()
            if stages.breakers is not None:
                await stages.breakers.arecord(route.name, None, seconds=time.monotonic() - started)
            await _asettle_limit(ctx, stages, leg, response=response)
            if outcome.winner is None:
                outcome.winner, outcome.response = route, response
        running.discard(route.name)
        if outcome.winner is not None or outcome.unexpected is not None or not running:
            settled.set()

    async with anyio.create_task_group() as tasks:
        running.add(first.name)
        tasks.start_soon(attempt, first, reservation)
        with anyio.move_on_after(delay):
            await settled.wait()
        first_error = outcome.errors.get(first.name)
        may_hedge = (
            outcome.winner is None
            and outcome.unexpected is None
            and (first_error is None or _moves_on(stages, first_error))
        )
        if may_hedge:
            allowed, leg = await _astart_hedge(ctx, stages, second)
            if allowed:
                settled = anyio.Event()  # now wait for a winner, or for both to fail
                running.add(second.name)
                outcome.attempts += 1
                tasks.start_soon(attempt, second, leg)
        if running:
            await settled.wait()
        tasks.cancel_scope.cancel()
    return outcome
