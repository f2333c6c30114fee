"""The fallback chain for one non-streaming call, written once for sync and async.

:func:`plan` walks the routes (breaker permit, retries under the budget, fall-through) as a
generator that *yields* each piece of I/O it needs (an :class:`Op`) and receives the result.
:func:`run` performs those ops synchronously, :func:`arun` with ``await``: the decisions live
in one place, and neither twin wraps the other.

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
from .errors import ProviderError
from .models import ChatResponse
from .pipeline import Stages
from .providers.base import Provider

__all__ = ["Op", "arun", "plan", "run"]


@dataclass(frozen=True)
class Op:
    """One piece of I/O the chain needs: what, for which route, with which arguments."""

    kind: Literal["record_request", "permit", "call", "record", "spend", "sleep", "hedge"]
    route: Provider | None = None
    error: ProviderError | None = None
    seconds: float = 0.0
    hedge: Provider | None = None


@dataclass
class HedgeResult:
    """How a hedged pair went: the winner and its answer, or each route's error."""

    winner: Provider | None = None
    response: ChatResponse | None = None
    errors: dict[str, ProviderError] = field(default_factory=dict)
    attempts: int = 1


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
            attempt += 1
            ctx.attempts += 1
            started = time.monotonic()
            try:
                response: ChatResponse = yield Op("call", route)
            except ProviderError as failure:
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
            if stages.breakers is not None:
                yield Op("record", route, None, time.monotonic() - started)
            ctx.route = route.name
            return response
    degraded = pipeline.degraded_response(ctx, stages)
    if degraded is not None:
        return degraded
    raise pipeline.failure(ctx, stages)


def _hedged(
    ctx: CallContext, stages: Stages, delay: float, tried: set[str]
) -> Generator[Op, Any, ChatResponse | None]:
    """Race the first two usable routes: the second starts when the first has not answered
    within ``delay`` (or failed first). The first answer wins; the other attempt is cancelled
    (async) or abandoned to finish by its deadline (sync). A hedged pair is not retried; if
    both fail, the chain goes on with the routes after them.
    """
    usable = [r for r in stages.routes if not pipeline.too_small_for(ctx, r)]
    if len(usable) < 2:
        return None
    first, second = usable[0], usable[1]
    if stages.breakers is not None:
        permit = yield Op("permit", first)
        if not permit.allowed:
            pipeline.route_refused(ctx, stages, first, permit)
            tried.add(first.name)
            return None
    result: HedgeResult = yield Op("hedge", first, seconds=delay, hedge=second)
    ctx.attempts += result.attempts
    if result.winner is not None and result.response is not None:
        ctx.route = result.winner.name
        return result.response
    for route in (first, second):
        error = result.errors.get(route.name)
        if error is not None:
            tried.add(route.name)
            pipeline.fall_through(ctx, route, error, delivered=False, moves_on=stages.moves_on)
    return None


def run(ctx: CallContext, stages: Stages) -> ChatResponse:
    """Carry out :func:`plan` with blocking I/O."""
    steps = plan(ctx, stages)
    result: Any = None
    error: ProviderError | None = None
    while True:
        try:
            op = steps.throw(error) if error is not None else steps.send(result)
        except StopIteration as done:
            response: ChatResponse = done.value
            return response
        result, error = None, None
        try:
            result = _perform(op, ctx, stages)
        except ProviderError as failure:
            error = failure
        except BaseException:
            if op.kind == "call" and op.route is not None and stages.breakers is not None:
                stages.breakers.release(op.route.name)  # no outcome: give the permit back
            raise


async def arun(ctx: CallContext, stages: Stages) -> ChatResponse:
    """Carry out :func:`plan` with async I/O."""
    steps = plan(ctx, stages)
    result: Any = None
    error: ProviderError | None = None
    while True:
        try:
            op = steps.throw(error) if error is not None else steps.send(result)
        except StopIteration as done:
            response: ChatResponse = done.value
            return response
        result, error = None, None
        try:
            result = await _aperform(op, ctx, stages)
        except ProviderError as failure:
            error = failure
        except BaseException:  # cancelled, or not a provider failure
            if op.kind == "call" and op.route is not None and stages.breakers is not None:
                await stages.breakers.arelease(op.route.name)
            raise


def _perform(op: Op, ctx: CallContext, stages: Stages) -> Any:
    route = op.route
    if op.kind == "sleep":
        time.sleep(op.seconds)
        return None
    if op.kind == "hedge":
        assert route is not None
        assert op.hedge is not None
        return _hedge_sync(ctx, stages, route, op.hedge, op.seconds)
    assert route is not None
    if op.kind == "call":
        return route.complete(
            ctx.request,
            model=pipeline.route_model(route, ctx.request),
            deadline=pipeline.attempt_deadline(ctx, stages),
        )
    if op.kind == "permit":
        assert stages.breakers is not None
        return stages.breakers.permit(route.name)
    if op.kind == "record":
        assert stages.breakers is not None
        return stages.breakers.record(route.name, op.error, seconds=op.seconds)
    assert stages.budget is not None
    if op.kind == "spend":
        return stages.budget.try_spend(route.name)
    return stages.budget.record_request(route.name)


async def _aperform(op: Op, ctx: CallContext, stages: Stages) -> Any:
    route = op.route
    if op.kind == "sleep":
        await anyio.sleep(op.seconds)
        return None
    if op.kind == "hedge":
        assert route is not None
        assert op.hedge is not None
        return await _hedge_async(ctx, stages, route, op.hedge, op.seconds)
    assert route is not None
    if op.kind == "call":
        return await route.acomplete(
            ctx.request,
            model=pipeline.route_model(route, ctx.request),
            deadline=pipeline.attempt_deadline(ctx, stages),
        )
    if op.kind == "permit":
        assert stages.breakers is not None
        return await stages.breakers.apermit(route.name)
    if op.kind == "record":
        assert stages.breakers is not None
        return await stages.breakers.arecord(route.name, op.error, seconds=op.seconds)
    assert stages.budget is not None
    if op.kind == "spend":
        return await stages.budget.atry_spend(route.name)
    return await stages.budget.arecord_request(route.name)


def _attempt(ctx: CallContext, stages: Stages, route: Provider) -> ChatResponse:
    """One sync attempt on ``route``, its outcome recorded by the route's breaker."""
    started = time.monotonic()
    try:
        response = route.complete(
            ctx.request,
            model=pipeline.route_model(route, ctx.request),
            deadline=pipeline.attempt_deadline(ctx, stages),
        )
    except ProviderError as error:
        if stages.breakers is not None:
            stages.breakers.record(route.name, error, seconds=time.monotonic() - started)
        raise
    if stages.breakers is not None:
        stages.breakers.record(route.name, None, seconds=time.monotonic() - started)
    return response


def _hedge_sync(
    ctx: CallContext, stages: Stages, first: Provider, second: Provider, delay: float
) -> HedgeResult:
    """The sync hedge: each attempt in its own thread; the loser is abandoned (it ends by the
    call's deadline and still reports to its breaker)."""
    results: queue.SimpleQueue[tuple[Provider, ChatResponse | ProviderError]] = queue.SimpleQueue()

    def attempt(route: Provider) -> None:
        try:
            results.put((route, _attempt(ctx, stages, route)))
        except ProviderError as error:
            results.put((route, error))

    def start(route: Provider) -> None:
        threading.Thread(target=attempt, args=(route,), daemon=True).start()

    outcome = HedgeResult()
    start(first)
    running, hedged = 1, False
    while running:
        wait = min(delay if not hedged else math.inf, ctx.remaining())
        try:
            route, result = results.get(timeout=max(0.0, wait))
        except queue.Empty:
            if hedged or ctx.remaining() <= 0:
                break  # the deadline: the attempts end by themselves
            hedged = True
            started = _start_hedge(ctx, stages, second, start)
            running += started
            outcome.attempts += started
            continue
        running -= 1
        if isinstance(result, ChatResponse):
            outcome.winner, outcome.response = route, result
            return outcome
        outcome.errors[route.name] = result
        if not hedged:  # the first failed before the delay: start the second now
            hedged = True
            started = _start_hedge(ctx, stages, second, start)
            running += started
            outcome.attempts += started
    return outcome


def _start_hedge(ctx: CallContext, stages: Stages, second: Provider, start: Any) -> int:
    """Start the second route if its breaker allows; 1 if started, else 0."""
    if stages.breakers is not None:
        permit = stages.breakers.permit(second.name)
        if not permit.allowed:
            pipeline.route_refused(ctx, stages, second, permit)
            return 0
    start(second)
    return 1


async def _hedge_async(
    ctx: CallContext, stages: Stages, first: Provider, second: Provider, delay: float
) -> HedgeResult:
    """The async hedge: both attempts in one task group; the loser is cancelled."""
    outcome = HedgeResult()
    settled = anyio.Event()
    running = 0

    async def attempt(route: Provider) -> None:
        nonlocal running
        started = time.monotonic()
        try:
            response = await route.acomplete(
                ctx.request,
                model=pipeline.route_model(route, ctx.request),
                deadline=pipeline.attempt_deadline(ctx, stages),
            )
        except ProviderError as error:
            if stages.breakers is not None:
                await stages.breakers.arecord(route.name, error, seconds=time.monotonic() - started)
            outcome.errors[route.name] = error
        except anyio.get_cancelled_exc_class():
            if stages.breakers is not None:
                await stages.breakers.arelease(route.name)  # cancelled: no outcome
            raise
        else:
            if stages.breakers is not None:
                await stages.breakers.arecord(route.name, None, seconds=time.monotonic() - started)
            if outcome.winner is None:
                outcome.winner, outcome.response = route, response
        running -= 1
        if outcome.winner is not None or running == 0:
            settled.set()

    async with anyio.create_task_group() as tasks:
        running = 1
        tasks.start_soon(attempt, first)
        with anyio.move_on_after(delay):
            await settled.wait()
        if outcome.winner is None:  # no answer within the delay (or the first failed): hedge
            allowed = True
            if stages.breakers is not None:
                permit = await stages.breakers.apermit(second.name)
                allowed = permit.allowed
                if not allowed:
                    pipeline.route_refused(ctx, stages, second, permit)
            if allowed:
                settled = anyio.Event()  # now wait for a winner, or for both to fail
                running += 1
                outcome.attempts += 1
                tasks.start_soon(attempt, second)
            if running:
                await settled.wait()
        tasks.cancel_scope.cancel()
    return outcome
