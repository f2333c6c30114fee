"""THE plan: the route loop of every guarded call, written once.

Plain calls and streams, hedged or not, walk the same loop::

    [hedge race of the first two usable routes]
    for each route (a race's winner first):
        retry budget counts the request
        loop: admit (breaker permit, rate-limit reservation, wait for its slot)
              attempt (a whole answer; or a stream read chunk by chunk, each emitted)
              on failure: retry after a jittered wait, or leave the route
    stale or degraded answer, else the error

The plan is a generator: it yields an op (:mod:`.ops`) for each piece of I/O and receives
its answer; a provider's failure is thrown into it. :mod:`.drive` carries the ops out, with
blocking I/O or with ``await``. What needs no answer is queued in the call's tail by
:class:`~._core.run.Run`.

A hedge race (:func:`race`) is a plan of its own: start the first leg; after ``hedge_after``
without an answer, or after a failure that moves the call on, start the second (if its
breaker and its rate limit let it, now); the first leg ready wins (a whole answer, or a
stream's first content), the other is ended and gives its permit and lease back. A hedged
pair is not retried; if both fail, the chain goes on with the next routes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator
from typing import Any

from ..errors import ProviderError, ProviderTimeoutError, StreamInterruptedError
from ..models import ChatResponse, StreamChunk
from ..providers.base import Provider
from . import limits, routes
from .assembly import Assembler
from .limits import Reservation
from .ops import (
    Ask,
    AwaitLeg,
    Complete,
    Emit,
    LegEvent,
    Next,
    Open,
    Preopened,
    Race,
    Sleep,
    StartLeg,
    StopLegs,
)
from .run import Run, elapsed_since

__all__ = ["plan", "race"]

Plan = Generator[Any, Any, ChatResponse]


def plan(run: Run) -> Plan:
    """The route loop of one call (see the module docs); returns the raw response."""
    ctx = run.ctx
    raced: Preopened | None = None
    if ctx.hedge_after is not None:
        won = yield from _hedge(run)
        if isinstance(won, ChatResponse):
            return won
        raced = won
    for route in run.route_order(raced.route if raced is not None else None):
        if routes.too_small_for(ctx, route):
            continue
        run.count_request(route)
        attempt, previous_wait, previous = 0, 0.0, None
        while True:
            opened, raced = (raced, None) if raced is not None else (None, None)
            reservation: Reservation | None
            if opened is None:
                admitted, reservation = yield from _admit(run, route)
                if not admitted:
                    break
                ctx.attempts += 1
            else:
                reservation = opened.reservation
            attempt += 1
            try:
                if run.streaming:
                    response = yield from _stream(run, route, reservation, opened)
                else:
                    response = yield from _complete(run, route, reservation)
            except ProviderError as failure:
                exc = previous = routes.real_error(failure, previous)
                waited = yield from _retry(run, route, exc, attempt, previous_wait)
                if waited is not None:
                    previous_wait = waited
                    continue
                run.leave_route(route, exc)
                break
            ctx.route = route.name
            return response
    return run.no_route_left()


def _retry(
    run: Run, route: Provider, error: ProviderError, attempt: int, previous_wait: float
) -> Generator[Any, Any, float | None]:
    """Whether to retry ``route`` after ``error`` (the policy, the retry budget, the time
    left); when so, wait the backoff first and return the policy's wait (None: no retry)."""
    ctx, stages = run.ctx, run.stages
    decision = routes.retry_after_failure(
        ctx, stages, error, attempt=attempt, previous_wait=previous_wait, delivered=run.delivered
    )
    if not decision.retry:
        return None
    if stages.budget is not None and not (yield Ask(stages.budget.try_spend_steps(route.name))):
        return None
    if not routes.still_fits(ctx, decision):
        return None
    yield Sleep(routes.note_retry(ctx, route, error, attempt, decision))
    return decision.wait


def _admit(run: Run, route: Provider) -> Generator[Any, Any, tuple[bool, Reservation | None]]:
    """(admitted, reservation): ``route``'s breaker permit and its rate-limit reservation
    (waiting for a slot that lies a little ahead). Refused: recorded, the chain moves on."""
    ctx, stages = run.ctx, run.stages
    if stages.breakers is not None:
        permit = run.permit_ahead(route)
        if permit is None:
            permit = yield Ask(stages.breakers.permit_steps(route.name))
        if not permit.allowed:
            routes.route_refused(ctx, stages, route, permit)
            return False, None
    reservation = limits.token_reservation(ctx, stages, route)
    if reservation is None:
        return True, None
    grant = run.grant_ahead(route, reservation)
    if grant is None:
        grant = yield Ask(limits.reserve_steps(ctx, stages, reservation))
    if not grant.allowed:
        routes.route_rate_limited(ctx, route, grant)
        run.release(route)
        return False, None
    if grant.wait > 0:  # our slot lies a little ahead: wait for it
        ctx.rate_wait_s += grant.wait
        try:
            yield Sleep(grant.wait)
        except BaseException:  # cancelled while waiting: nothing was sent
            run.settle(reservation)
            run.release(route)
            raise
    return True, reservation


def _complete(
    run: Run, route: Provider, reservation: Reservation | None
) -> Generator[Any, Any, ChatResponse]:
    """One non-streaming attempt, its outcome recorded and its reservation settled."""
    ctx = run.ctx
    started = time.monotonic()
    record = ctx.begin_attempt(route.name)
    try:
        response: ChatResponse = yield _complete_op(run, route)
    except ProviderError as failure:
        record.end(failure)
        run.settle(reservation, error=failure)  # nothing was generated: tokens back
        run.record(route, failure, elapsed_since(started))
        raise
    except BaseException:  # closed, cancelled or a bug: no outcome; it may have been sent
        run.queue(run.give_back_steps(route, reservation))
        raise
    record.end()
    run.record(route, None, elapsed_since(started))
    if reservation is not None:
        used = limits.response_usage(ctx, reservation, response)
        run.settle(reservation, used=used, headers=response.headers)
    return response


def _stream(
    run: Run, route: Provider, reservation: Reservation | None, opened: Preopened | None
) -> Generator[Any, Any, ChatResponse]:
    """One streamed attempt: each chunk emitted as it comes; the assembled response."""
    ctx, stages = run.ctx, run.stages
    ctx.route = route.name
    record = opened.record if opened is not None else ctx.begin_attempt(route.name)
    assembler = Assembler(ctx, run.carried, record)
    run.delivered, run.delivered_text = False, run.carried
    try:
        if opened is not None:
            chunks, buffered = opened.chunks, opened.buffered
        else:
            chunks, buffered = (
                (
                    yield Open(
                        route,
                        run.request,
                        routes.route_model(route, run.request),
                        ctx.deadline,
                        stages.attempt_timeout,
                    )
                ),
                [],
            )
        while True:
            chunk: StreamChunk | None = buffered.pop(0) if buffered else (yield Next(chunks))
            if chunk is None:
                break
            assembler.add(chunk)
            run.delivered, run.delivered_text = assembler.delivered, assembler.text
            if run.worth_emitting(chunk):
                yield Emit(chunk)
    except ProviderError as failure:
        ctx.route = None
        record.end(failure)
        used = assembler.used(route.name, reservation.input if reservation else 0, failure)
        run.settle(reservation, used=used, error=failure)
        run.record(route, failure, assembler.seconds())
        raise
    except BaseException:  # closed early or cancelled: no outcome; settle to what came
        run.release(route)
        if reservation is not None:
            used = assembler.used(route.name, reservation.input, None)
            run.settle(reservation, used=used, headers=assembler.headers)
        raise
    record.end()
    run.record(route, None, assembler.seconds())
    if reservation is not None:
        used = assembler.used(route.name, reservation.input, None)
        run.settle(reservation, used=used, headers=assembler.headers)
    response = assembler.response(route.name)
    if run.carried:
        continued = [
            name for name, e in ctx.route_errors.items() if isinstance(e, StreamInterruptedError)
        ]
        metadata = {**response.metadata, "continued_after": continued}
        response = response.model_copy(update={"metadata": metadata})
    return response


# -- hedging ------------------------------------------------------------------------------------


def _hedge(run: Run) -> Generator[Any, Any, ChatResponse | Preopened | None]:
    """Race the first usable route its breaker and rate limit admit against the next one:
    the winner's answer (a plain call) or its opened stream; None when there was no race
    or no winner (the routes it used up are in ``run.tried``)."""
    ctx = run.ctx
    usable = [r for r in run.stages.routes if not routes.too_small_for(ctx, r)]
    for index, first in enumerate(usable[:-1]):
        admitted, reservation = yield from _admit(run, first)
        if not admitted:
            run.tried.add(first.name)
            continue
        run.give_back_ahead()  # the race asks for its other leg itself
        outcome: ChatResponse | Preopened | None = yield Race(
            race(run, first, usable[index + 1], reservation)
        )
        return outcome
    return None


class _Leg:
    """One route of a race, as the plan tracks it."""

    def __init__(self, route: Provider, reservation: Reservation | None, run: Run) -> None:
        self.route = route
        self.reservation = reservation
        self.record = run.ctx.begin_attempt(route.name)
        self.started = time.monotonic()
        self.ended = False


def _start(run: Run, leg: _Leg) -> StartLeg:
    run.ctx.attempts += 1
    run.tried.add(leg.route.name)
    return StartLeg(_open(run, leg.route) if run.streaming else _complete_op(run, leg.route))


def _complete_op(run: Run, route: Provider) -> Complete:
    """One non-streaming attempt on ``route``: its model, its deadline."""
    return Complete(
        route,
        run.request,
        routes.route_model(route, run.request),
        routes.attempt_deadline(run.ctx, run.stages),
    )


def _open(run: Run, route: Provider) -> Open:
    """A stream on ``route``: the call's deadline, the attempt timeout between chunks."""
    return Open(
        route,
        run.request,
        routes.route_model(route, run.request),
        run.ctx.deadline,
        run.stages.attempt_timeout,
    )


def _admit_now(run: Run, route: Provider) -> Generator[Any, Any, tuple[bool, Reservation | None]]:
    """The second leg's permit and reservation: only if its rate limit has room now (a
    hedge that waited for a slot would defeat its purpose)."""
    ctx, stages = run.ctx, run.stages
    if stages.breakers is not None:
        permit = yield Ask(stages.breakers.permit_steps(route.name))
        if not permit.allowed:
            routes.route_refused(ctx, stages, route, permit)
            return False, None
    reservation = limits.token_reservation(ctx, stages, route)
    if reservation is not None:
        grant = yield Ask(limits.reserve_steps(ctx, stages, reservation, wait=False))
        if not grant.allowed:
            routes.route_rate_limited(ctx, route, grant)
            run.release(route)
            return False, None
    return True, reservation


def race(
    run: Run, first: Provider, second: Provider, reservation: Reservation | None
) -> Generator[Any, Any, ChatResponse | Preopened | None]:
    """Decide a hedge race (see the module docs); the driver runs its legs."""
    ctx, stages = run.ctx, run.stages
    delay = ctx.hedge_after or 0.0
    legs = {first.name: _Leg(first, reservation, run)}
    errors: dict[str, ProviderError] = {}
    winner: tuple[_Leg, LegEvent] | None = None
    unexpected: BaseException | None = None
    hedged = False
    try:
        yield _start(run, legs[first.name])
        while any(not leg.ended for leg in legs.values()):
            wait = min(delay if not hedged else math.inf, ctx.remaining())
            event: LegEvent | None = yield AwaitLeg(max(0.0, wait))
            if event is None:
                if hedged or ctx.remaining() <= 0:
                    break  # the deadline: what still runs has timed out
            else:
                leg = legs[event.route]
                leg.ended = True
                if event.unexpected is not None:
                    unexpected = event.unexpected
                    break
                if event.error is None:
                    winner = (leg, event)
                    break
                errors[leg.route.name] = event.error
                leg.record.end(event.error)
                run.settle(leg.reservation, error=event.error)
                run.record(leg.route, event.error, elapsed_since(leg.started))
                moves_on = stages.moves_on or routes.is_route_failure
                if hedged or not moves_on(event.error):
                    continue
            if not hedged:  # the delay passed, or the first failed early: start the second
                hedged = True
                admitted, second_reservation = yield from _admit_now(run, second)
                if admitted:
                    legs[second.name] = _Leg(second, second_reservation, run)
                    yield _start(run, legs[second.name])
                else:
                    run.tried.add(second.name)
        after: dict[str, list[Any]] = {}
        for leg in legs.values():
            if leg.ended:
                continue
            leg.ended = True
            if winner is None and unexpected is None and ctx.remaining() <= 0:
                timed_out = ProviderTimeoutError(
                    "no answer before the call's deadline (hedged)", route=leg.route.name
                )
                errors[leg.route.name] = timed_out
                run.record(leg.route, timed_out, elapsed_since(leg.started))
                after[leg.route.name] = run.settle_steps(leg.reservation, sent=True)
            else:  # lost the race: no outcome (its attempt record stays open: cancelled)
                after[leg.route.name] = run.give_back_steps(leg.route, leg.reservation)
        keep = winner[0].route.name if winner is not None and run.streaming else None
        yield StopLegs(keep, after)
    except BaseException:  # closed or cancelled mid-race: every running leg gives back
        for leg in legs.values():
            if not leg.ended:
                leg.ended = True
                run.queue(run.give_back_steps(leg.route, leg.reservation))
        raise
    if unexpected is not None:
        raise unexpected
    if winner is None:
        for name, error in errors.items():
            routes.fall_through(
                ctx, legs[name].route, error, delivered=False, moves_on=stages.moves_on
            )
        return None
    ctx.route_errors.update(errors)
    return _won(run, *winner)


def _won(run: Run, leg: _Leg, event: LegEvent) -> ChatResponse | Preopened:
    """The race's winner: a plain call's answer (recorded and settled here), or a stream to
    be read by the route loop (recorded and settled when it ends)."""
    if isinstance(event.value, ChatResponse):
        response = event.value
        leg.record.end()
        run.record(leg.route, None, elapsed_since(leg.started))
        if leg.reservation is not None:
            used = limits.response_usage(run.ctx, leg.reservation, response)
            run.settle(leg.reservation, used=used, headers=response.headers)
        run.ctx.route = leg.route.name
        return response
    assert event.value is not None
    buffered, chunks = event.value
    run.tried.discard(leg.route.name)
    return Preopened(leg.route, leg.reservation, leg.record, list(buffered), chunks)
