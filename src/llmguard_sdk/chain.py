"""The fallback chain for one non-streaming call, written once for sync and async.

:func:`plan` walks the routes (breaker permit, retries under the budget, fall-through) as a
generator that *yields* each piece of I/O it needs (an :class:`Op`) and receives the result.
:func:`run` performs those ops synchronously, :func:`arun` with ``await``: the decisions live
in one place, and neither twin wraps the other.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
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

    kind: Literal["record_request", "permit", "call", "record", "spend", "sleep"]
    route: Provider | None = None
    error: ProviderError | None = None
    seconds: float = 0.0


Plan = Generator[Op, Any, ChatResponse]


def plan(ctx: CallContext, stages: Stages) -> Plan:
    """Each route behind its breaker, with its retries; then the next; then degraded/failure."""
    for route in stages.routes:
        if pipeline.too_small_for(ctx, route):
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
