"""THE plan: the route loop of every guarded call, written once.

Plain calls and streams, hedged or not, walk the same loop::

    [hedge race of the first two usable routes]
    for each route (a race's winner first):
        [a stale cached answer instead of a local route standing in for remote ones]
        retry budget counts the request
        loop: admit (breaker permit, rate-limit reservation, wait for its slot)
              attempt (a whole answer; or a stream read chunk by chunk, each emitted)
              on failure: retry after a jittered wait, or leave the route
    stale or degraded answer, else the error

The plan is a generator: it yields an op (:mod:`.ops`) for each piece of I/O and receives
its answer; a provider's failure is thrown into it. :mod:`.drive` carries the ops out, with
blocking I/O or with ``await``. What needs no answer is queued in the call's tail by
:class:`~._core.run.Run`.

A hedge race (:mod:`.race`) is a plan of its own, started by the loop before its first route.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

from ..budget._reserve import with_output_limit
from ..budget._topup import needs_top_up
from ..context import AttemptRecord
from ..errors import (
    BudgetExceededError,
    EmptyStreamError,
    ProviderError,
    StreamInterruptedError,
)
from ..models import ChatResponse, StreamChunk
from ..providers.base import Provider
from ..retry.policy import Decision
from . import limits, routes
from . import race as hedging
from .assembly import Assembler
from .limits import Reservation
from .ops import Complete, Emit, Next, Open, Preopened, Sleep, answer_of
from .run import Run, elapsed_since

__all__ = ["admit", "complete_op", "open_op", "plan"]

Plan = Generator[Any, Any, ChatResponse]

_EMPTY = "empty stream: the route's stream ended without any chunk"


def plan(run: Run) -> Plan:
    """The route loop of one call (see the module docs); returns the raw response. With
    deployment groups, the call holds a lease on the deployment each group it reaches sends
    it to (its calls in flight), from then to its end."""
    routing = run.stages.routing
    if routing is None:
        return (yield from _route_loop(run))
    held = run.leases  # given back however the call ends, cut short while leasing too
    try:
        return (yield from _route_loop(run))
    finally:
        run.queue([routing.give_back_steps([lease]) for lease in held])


def _route_loop(run: Run) -> Plan:
    ctx = run.ctx
    raced: Preopened | None = None
    if ctx.hedge_after is not None:
        won = yield from hedging.hedge(run)
        if isinstance(won, ChatResponse):
            return won
        raced = won
    order = run.route_order(raced.route if raced is not None else None)
    while order:
        # (a group reached first takes the call; a canary's fallback: the current release's)
        route = yield from run.reach(order.pop(0), order)
        run.tried.add(route.name)  # reached: a budget's move sends the call to others
        if routes.too_small_for(ctx, route):
            continue
        if raced is None:
            stale = yield from run.stale_in_place_of(route)
            if stale is not None:
                return stale
        attempt, previous_wait, previous = 0, 0.0, None
        while True:
            opened, raced = (raced, None) if raced is not None else (None, None)
            reservation: Reservation | None
            if opened is None:
                # (a retry's hold was topped up before its wait)
                if attempt == 0 and (yield from _hold_enough(run, route, order)):
                    break  # no room for this route: a budget moved the call on
                admitted, reservation = yield from admit(run, route)
                if not admitted:
                    _refused(run, route, previous, order)
                    break
                ctx.attempts += 1
            else:
                reservation = opened.reservation
            if attempt == 0:  # the call goes to the route (once a call: retries are not)
                run.count_request(route)
            attempt += 1
            try:
                if run.streaming:
                    response = yield from _stream(run, route, reservation, opened)
                else:
                    response = yield from _complete(run, route, reservation)
            except ProviderError as failure:
                exc = previous = routes.real_error(failure, previous)
                waited = yield from _retry(run, route, exc, attempt, previous_wait, order)
                if waited is not None:
                    previous_wait = waited
                    continue
                run.leave_route(route, exc, order)
                break
            ctx.route = route.name
            return response
    return (yield from run.no_route_left())


def _refused(
    run: Run, route: Provider, previous: ProviderError | None, order: list[Provider]
) -> None:
    """``route`` refused an attempt (its breaker, its rate limit): when that was a retry,
    the failure before it stays the route's error, and the chain moves on from it (past
    ``order``'s candidate routes, as after the failure itself, when it sends a canary call
    to the current release)."""
    if previous is not None:
        routes.refused_retry(run.ctx, route, previous)
        _give_back_retry(run, route)  # never sent: it added no load
        run.leave_route(route, previous, order)


def _give_back_retry(run: Run, route: Provider) -> None:
    """Give back to the retry budget (if any) a retry of ``route`` it granted that was not
    made after all."""
    budget = run.stages.retry_budget
    refund = getattr(budget, "refund_steps", None)
    if refund is not None:
        run.queue([refund(route.name)])


def _retry(
    run: Run,
    route: Provider,
    error: ProviderError,
    attempt: int,
    previous_wait: float,
    order: list[Provider],
) -> Generator[Any, Any, float | None]:
    """Whether to retry ``route`` after ``error`` (the policy, the time left, the spend
    hold, then the retry budget); when so, wait the backoff first and return the policy's
    wait (None: no retry). A retry the budget's own round trip left no time for gives its
    spend back."""
    ctx, stages = run.ctx, run.stages
    routing = stages.routing
    if routing is not None and routing.can_fail_over(route.name, order, ctx.route_errors):
        return None  # a sibling deployment of its group takes the call now, without a wait
    decision = routes.retry_after_failure(
        ctx, stages, error, attempt=attempt, previous_wait=previous_wait, delivered=run.delivered
    )
    if not decision.retry or not routes.still_fits(ctx, decision):
        routes.note_give_up(ctx, stages, error, decision, attempt)
        return None  # (asked before the budget: no retry is spent on one not made)
    if routes.silence_leaves_no_time(ctx, route, error, decision, order):
        return None  # the next route keeps its attempt_timeout: it gets the call now
    if (yield from _hold_enough(run, route, order)):
        return None  # no room: a budget moved the call on (or it ended), no retry spent
    budget = stages.retry_budget
    if budget is not None:
        if not (yield from answer_of(budget.try_spend_steps(route.name))):
            routes.note_give_up(ctx, stages, error, Decision(False, 0.0, "budget-exhausted"))
            return None
        if not routes.still_fits(ctx, decision):  # the budget's round trip took the time
            routes.note_give_up(ctx, stages, error, decision)
            _give_back_retry(run, route)
            return None
    try:
        yield Sleep(routes.note_retry(ctx, route, error, attempt, decision))
    except BaseException:  # cancelled (or closed) in the wait: the retry is never made
        if budget is not None:
            _give_back_retry(run, route)
        raise
    return decision.wait


def _hold_enough(run: Run, route: Provider, order: list[Provider]) -> Generator[Any, Any, bool]:
    """Before an attempt: the call's spend hold covers what its attempts that went out were
    charged plus this attempt's worst case, topped up when not, so the guard's own retries,
    and a request that replaced the one held for (a canary call's fallback), never spend past
    a hard cap (with ``clamp_max_tokens``, the attempt's ``max_tokens`` is lowered to what
    the budgets allow instead). A budget without room for that acts by its
    ``on_exhausted``, as at the call's reservation: it moves the call to its cheaper or local
    routes not reached yet (``order`` becomes them; True), else ends the call
    (:class:`~llmguard_sdk.errors.BudgetExceededError`). A stream that delivered text before
    it was interrupted ends with that interruption (its text), caused by the budget's
    error."""
    held, spend = run.held, run.stages.spend
    if held is None or spend is None or not needs_top_up(held, run.ctx):
        return False
    left = [r for r in run.stages.routes if r.name not in run.tried]
    try:
        moved = yield from answer_of(spend.top_up_steps(held, run.ctx, route, left))
    except BudgetExceededError as refused:
        if run.interrupted is not None:
            raise run.interrupted from refused
        raise
    limit = run.ctx.request.most_output  # lowered by a clamped top-up: sent so
    if limit is not None and limit < (run.request.most_output or limit + 1):
        run.request = with_output_limit(run.request, limit)
    if not moved:
        return False
    order[:] = run.moved_order(moved)
    return True


def admit(run: Run, route: Provider) -> Generator[Any, Any, tuple[bool, Reservation | None]]:
    """(admitted, reservation): ``route``'s breaker permit and its rate-limit reservation
    (waiting for a slot that lies a little ahead). Refused: recorded, the chain moves on."""
    ctx, stages = run.ctx, run.stages
    if stages.breakers is not None:
        permit = run.permit_ahead(route)
        if permit is None:
            permit = yield from answer_of(stages.breakers.permit_steps(route.name))
        if not permit.allowed:
            routes.route_refused(ctx, stages, route, permit)
            return False, None
        run.permitted(route, permit)
    reservation = limits.token_reservation(ctx, stages, route)
    if reservation is None:
        return True, None
    grant = run.grant_ahead(route, reservation)
    if grant is None:
        grant = yield from run.reserve(route, reservation)
    if not grant.allowed:
        routes.route_rate_limited(ctx, stages, route, grant, reservation)
        run.release(route)
        return False, None
    if grant.wait > 0:  # our slot lies a little ahead: wait for it
        ctx.rate_wait_s += grant.wait
        try:
            yield Sleep(grant.wait)
        except BaseException:  # cancelled while waiting: nothing was sent (its slot back)
            run.settle(reservation, unsent=True)
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
        response: ChatResponse = yield complete_op(run, route, record)
    except ProviderError as failure:
        record.end(failure)
        routes.note_attempt_timeout(ctx, route, failure)
        sent = limits.failed_once_sent(ctx, route, reservation, failure)  # (its prompt billed)
        run.settle(reservation, used=sent, error=failure)  # nothing generated: output back
        run.record(route, failure, elapsed_since(started))
        raise
    except BaseException:  # closed, cancelled or a bug: no outcome; it may have been sent
        limits.cut_off(ctx, route, reservation)  # (its prompt billed)
        run.queue(run.give_back_steps(route, reservation))
        raise
    record.end()
    seconds = elapsed_since(started)
    out = response.usage.output_tokens if response.usage is not None else 0
    run.record(route, None, seconds, sample=(seconds, None, out), headers=response.headers)
    used = limits.response_usage(ctx, route, reservation, response)
    if reservation is not None:
        run.settle(reservation, used=used, headers=response.headers)
    return limits.with_usage(response, used)  # (priced as settled)


def _stream(
    run: Run, route: Provider, reservation: Reservation | None, opened: Preopened | None
) -> Generator[Any, Any, ChatResponse]:
    """One streamed attempt: each chunk emitted as it comes; the assembled response."""
    ctx = run.ctx
    ctx.route = route.name
    record = opened.record if opened is not None else ctx.begin_attempt(route.name)
    assembler = Assembler(ctx, run.carried, record, run.carried_metadata)
    run.delivered, run.delivered_text, run.delivered_tool_call = False, run.carried, False
    run.delivered_metadata = assembler.metadata  # (it grows with each chunk)
    try:
        if opened is not None:
            chunks, buffered = opened.chunks, opened.buffered
        else:
            chunks, buffered = (yield open_op(run, route, record)), []
        while True:
            chunk: StreamChunk | None = buffered.pop(0) if buffered else (yield Next(chunks))
            if chunk is None:
                if not assembler.chunks:  # whatever the route: never an empty answer
                    raise EmptyStreamError(_EMPTY, route=route.name)
                break
            assembler.add(chunk)
            run.delivered, run.delivered_text, run.delivered_tool_call = (
                assembler.delivered,
                assembler.text,
                assembler.called,
            )
            if (emitted := run.emitted(chunk)) is not None:
                yield from _hand(assembler, emitted)
    except BaseException as stopped:  # broke, or closed early or cancelled
        _stopped(run, route, reservation, (record, assembler), stopped)
        raise
    record.end()
    run.record(
        route, None, assembler.seconds(), sample=assembler.sample(), headers=assembler.headers
    )
    used = assembler.used(_counting(run, route, assembler), _sent(run, route, reservation))
    run.settle(reservation, used=used, headers=assembler.headers)  # (none: nothing to settle)
    hedging.charge_silent_losers(run, used, assembler.reasoned)  # (a race's winner)
    response = limits.with_usage(assembler.response(route.name), used)  # (priced as settled)
    return _continued(run, response) if run.interrupted is not None else response


def _stopped(
    run: Run,
    route: Provider,
    reservation: Reservation | None,
    attempt: tuple[AttemptRecord, Assembler],
    stopped: BaseException,
) -> None:
    """A streamed attempt that did not end: it broke (a :class:`ProviderError`, an outcome
    for its breaker) or was closed early or cancelled (no outcome); settled to what came,
    charged (``ctx.unserved``, whoever continues the call) what its provider bills
    (:meth:`.assembly.Assembler.charged`: its prompt once the provider took it, what it
    delivered, the server-side tools it ran). A race's winner never reports its reasoning
    then: its silent losers keep their prompts."""
    ctx, (record, assembler) = run.ctx, attempt
    run.silent_losers = []  # (see race.charge_silent_losers)
    failure = stopped if isinstance(stopped, ProviderError) else None
    used = limits.charge_stopped(ctx, route, reservation, assembler, failure)
    if failure is None:  # closed or cancelled
        if not assembler.delivered:  # no route served the call (as for a plain call)
            ctx.route = None
        run.release(route)
        run.settle(reservation, used=used, headers=assembler.headers)
        return
    ctx.route = None
    record.end(failure)
    routes.note_attempt_timeout(ctx, route, failure)
    run.settle(reservation, used=used, error=failure)
    run.record(route, failure, assembler.seconds())


def _continued(run: Run, response: ChatResponse) -> ChatResponse:
    """A continuation's response (after text or reasoning alone), its metadata naming the
    routes that broke (``continued_after``): its text and metadata hold theirs too."""
    errors = run.ctx.route_errors.items()
    continued = [name for name, e in errors if isinstance(e, StreamInterruptedError)]
    metadata = {**response.metadata, "continued_after": continued}
    return response.model_copy(update={"metadata": metadata})


def _hand(assembler: Assembler, chunk: StreamChunk) -> Generator[Any, Any, None]:
    """Emit ``chunk``: the time until the caller asks for the next one is the caller's pace,
    not the route's (left out of its latency measure)."""
    handed = time.monotonic()
    yield Emit(chunk)
    assembler.held(time.monotonic() - handed)


def _counting(run: Run, route: Provider, assembler: Assembler) -> str | None:
    """The model whose tokenizer counts what a streamed attempt delivered."""
    return limits.answer_model(run.ctx, route, assembler.model)


def _sent(run: Run, route: Provider, reservation: Reservation | None) -> int:
    """The input tokens a streamed attempt sent (:func:`~.limits.sent_input`)."""
    return limits.sent_input(run.ctx, route, reservation)


def complete_op(run: Run, route: Provider, record: AttemptRecord) -> Complete:
    """One non-streaming attempt on ``route`` (``record``: its record, just begun): its
    model, its deadline, its trace context."""
    return Complete(
        route,
        run.attempt_request(record),
        routes.route_model(route, run.request),
        routes.attempt_deadline(run.ctx),
    )


def open_op(run: Run, route: Provider, record: AttemptRecord) -> Open:
    """A stream on ``route`` (``record``: its attempt's, just begun): the call's deadline,
    its attempt timeout (the call's own, else the Guard's) before the first chunk and
    between chunks, its trace context."""
    return Open(
        route,
        run.attempt_request(record),
        routes.route_model(route, run.request),
        run.ctx.deadline,
        run.ctx.attempt_timeout,
    )
