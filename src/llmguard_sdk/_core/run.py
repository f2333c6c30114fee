"""One guarded call on its way through the routes: its state and its bookkeeping.

:class:`Run` is what the plan reads and writes besides the :class:`CallContext`: the request
it sends (a continuation replaces it after an interrupted stream), the routes a hedge race
used up, what the opening batch took ahead, and the call's :class:`Tail`. Everything whose
answer the plan does not wait for (breaker records and give-backs, rate-limit settles and
learning, the retry budget's request count) is queued in the tail here, never sent as an op.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._state.steps import Step
from ..breaker import Permit
from ..budget.control import Held
from ..context import AttemptRecord, CallContext
from ..errors import (
    ProviderError,
    ProviderTimeoutError,
    RateLimitedError,
    StreamInterruptedError,
)
from ..models import ChatRequest, ChatResponse, StreamChunk, Usage
from ..providers._chat_content import COMPLETION_FIELDS
from ..providers.base import Provider
from ..ratelimit import Grant, LearnArgs
from ..retry.budget import MemoryRetryBudget
from . import limits, routes
from .limits import Reservation
from .opening import Ahead, CallKeys, Tail
from .ops import Blocking, answer_of
from .routing import Lease
from .stages import Stages

__all__ = ["Run"]


@dataclass(eq=False)
class Run:
    """The state of one call's route loop (plain or streamed)."""

    ctx: CallContext
    stages: Stages
    streaming: bool
    tail: Tail  # where decisions that need no answer wait for the next round trip
    ahead: Ahead | None = None  # what the opening batch took for the first route
    held: Held | None = None  # the call's spend hold (topped up before a charged retry)
    keys: CallKeys | None = None  # the opening lookup's cache keys (for the stale lookups)
    request: ChatRequest = field(init=False)  # a continuation replaces it
    tried: set[str] = field(default_factory=set)  # routes a hedge race used up, or reached
    leases: list[Lease] = field(default_factory=list)  # on the deployments of its groups
    probes: dict[str, bool] = field(default_factory=dict)  # route: its permit is a probe
    response: ChatResponse | None = None  # what the plan returned
    # streams only: what the last attempt delivered, and an interruption carried on
    delivered: bool = False
    delivered_text: str = ""
    delivered_tool_call: bool = False  # part of a tool call went out: nothing goes on from it
    delivered_metadata: dict[str, Any] = field(default_factory=dict)  # (carried's with it)
    carried: str = ""
    carried_metadata: dict[str, Any] = field(default_factory=dict)  # its reasoning ...
    interrupted: StreamInterruptedError | None = None
    stale_looked_up: bool = False  # the cache's stale answer was asked for (and missed)
    # a hedge race's streamed losers cut off before any content: their places in
    # ctx.unserved and the output each was allowed (see race.charge_silent_losers)
    silent_losers: list[tuple[int, int]] = field(default_factory=list)
    _emitted: bool = False
    _given: frozenset[str] = frozenset()  # the answer's fields (created ...) the caller has
    _held_headers: tuple[str, dict[str, str]] | None = None  # a skipped chunk's (route's)

    def __post_init__(self) -> None:
        self.request = self.ctx.request

    def attempt_request(self, record: AttemptRecord) -> ChatRequest:
        """The request the attempt of ``record`` (just begun) sends: the call's, with the
        trace context of the attempt's span in its headers where the telemetry sends it."""
        telemetry = self.stages.telemetry
        if telemetry is None:
            return self.request
        stages = self.stages
        return telemetry.trace_attempt(
            self.ctx, stages.routes, record, self.request, stages.propagated
        )

    def reach_group(
        self, route: Provider, left: list[Provider] | None = None
    ) -> Generator[Any, Any, Provider]:
        """The call goes to ``route`` (``left``: the routes after it; None: a race's leg,
        which keeps its route); returns the route to try. A deployment group reached for
        the first time takes the call and leases it (see
        :meth:`~.routing.Routing.reach_steps`: it may send it to another of its
        deployments, ``left`` reordered in place)."""
        routing = self.stages.routing
        if routing is None:
            return route
        return (yield from answer_of(routing.reach_steps(self.ctx, route, left, self.leases)))

    def reach(self, route: Provider, left: list[Provider]) -> Generator[Any, Any, Provider]:
        """The loop goes to ``route`` (``left``: the routes after it); returns the route
        to try (see :meth:`reach_group`). A canary call's first fallback route (the current
        release's, its candidate's routes all failed) makes the call send what the current
        release shapes (see :meth:`~llmguard_sdk.releases.control.ReleaseControl.fall_back`),
        under a new idempotency key, an interrupted stream's continuation built on it."""
        ctx, releases = self.ctx, self.stages.releases
        route = yield from self.reach_group(route, left)
        if releases is None or all(r.name != route.name for r in ctx.fallback_routes):
            return route
        if not releases.fall_back(ctx):
            return route
        self.request = ctx.request = routes.with_new_keys(ctx.request)  # (another body)
        if ctx.continuation is not None:
            self.request = routes.continuation_request(ctx.request, self.carried)
            ctx.continue_with(self.request)
        return route

    # -- what the opening batch took ahead --------------------------------------------------

    def _ahead_for(self, route: Provider) -> Ahead | None:
        ahead = self.ahead
        if ahead is not None and ahead.route != route.name:
            self.give_back_ahead()  # the plan left the first route: return what it took
            return None
        return ahead

    def permit_ahead(self, route: Provider) -> Permit | None:
        """``route``'s breaker permit if the opening batch took it (once)."""
        ahead = self._ahead_for(route)
        return None if ahead is None else ahead.take_permit()

    def grant_ahead(self, route: Provider, reservation: Reservation) -> Grant | None:
        """``route``'s rate-limit grant if the opening batch took it (once)."""
        ahead = self._ahead_for(route)
        return None if ahead is None else ahead.take_grant(reservation)

    def permitted(self, route: Provider, permit: Permit) -> None:
        """``route``'s attempt holds ``permit``: its outcome or give-back says whether it
        was a half-open probe (one let through before the breaker opened is none)."""
        self.probes[route.name] = permit.probe

    def give_back_ahead(self) -> None:
        """Queue the give-back of what was taken ahead and not used."""
        if self.ahead is not None:
            for step in self.ahead.leftovers(self.stages):
                self.tail.add(step)

    # -- bookkeeping queued in the tail -----------------------------------------------------

    def queue(self, steps: list[Step[Any]]) -> None:
        """Send ``steps`` with the call's next round trip."""
        for step in steps:
            self.tail.add(step)

    def count_request(self, route: Provider) -> None:
        """The retry budget's request count for ``route``."""
        budget = self.stages.retry_budget
        if type(budget) is MemoryRetryBudget:  # in this process: counted now, no step
            budget.record_request(route.name)
        elif budget is not None:
            self.tail.add(budget.record_request_steps(route.name))

    def record(
        self,
        route: Provider,
        error: ProviderError | None,
        seconds: float,
        *,
        sample: tuple[float, float | None, int] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """An attempt's outcome: the breaker's record; the route's latency and headroom for
        its group (a request the provider refused as this request's fault, even when the call
        moves on from it, a context window too small, says nothing about the route, nor
        does a call out of time before its request went out: its permit is given back).
        ``sample``: (whole time, time to the first token of a stream, output tokens) of an
        answer; ``headers``: its headers."""
        if error is not None and _out_of_time_unsent(self.ctx, error):
            self.release(route)
            return
        breakers = self.stages.breakers
        if breakers is not None:
            probe = self.probes.get(route.name)
            name = route.name
            if not breakers.recorded_here(name, error, seconds=seconds, probe=probe):
                self.tail.add(breakers.record_steps(name, error, seconds=seconds, probe=probe))
        routing = self.stages.routing
        if routing is not None and (error is None or routes.measures_route(error)):
            total, first, tokens = sample or (seconds, None, 0)
            routing.observe(
                route.name, total, error=error, first_s=first, tokens=tokens, headers=headers
            )

    def release_steps(self, route: Provider) -> list[Step[Any]]:
        """Give back a breaker permit whose attempt has no outcome."""
        breakers = self.stages.breakers
        if breakers is None:
            return []
        return [breakers.release_steps(route.name, self.probes.get(route.name))]

    def release(self, route: Provider) -> None:
        self.queue(self.release_steps(route))

    def settle_steps(
        self,
        reservation: Reservation | None,
        *,
        used: Usage | None = None,
        error: ProviderError | None = None,
        sent: bool = False,
        unsent: bool = False,
        headers: dict[str, str] | None = None,
    ) -> list[Step[Any]]:
        """Settle a rate-limit reservation once: to what was ``used`` when known, else all
        tokens back after a failure or a wait that ended early, or (``sent``: the request
        may have reached the provider) only the concurrency lease back; ``unsent`` (a call
        cut short while it waited for its slot) gives its request back too, so the next
        call takes that slot, as does an ``error`` whose request provably never left (a
        refused connection: the provider never saw it). A 429 teaches its pause, an
        answer's ``headers`` the provider's own counters.

        A 429's call was not served: its request and tokens come back *after* its pause is
        learned, so the route has room for that call when the pause ends (its retry after
        ``Retry-After`` goes out; given back before, the pause swallowed them and the retry
        was refused by a hair)."""
        limiter = self.stages.limiter
        if reservation is None or limiter is None:
            return []
        if used is not None:
            reservation.used = used
        steps: list[Step[Any]] = []
        if isinstance(error, RateLimitedError):
            pause = min(error.retry_after or 0.0, limits.MAX_LEARNED_PAUSE_S)
            steps.append(limiter._learn_steps(reservation.route, {"pause": pause}))
            args = limits.settle_args(reservation)
            if args is not None:
                if reservation.used is None and "input_delta" in args:  # refunded: all back
                    args["request_delta"] = -1.0
                steps.append(limiter._settle_steps(reservation.route, args))
            return steps
        args = limits.settle_args(reservation, refund=not sent)
        if args is not None:
            never_left = error is not None and not error.request_sent  # (connection refused)
            if (unsent or never_left) and reservation.granted:
                args["request_delta"] = -1.0
            steps.append(limiter._settle_steps(reservation.route, args))
        taught: LearnArgs | None = None if headers is None else limits.learned(headers)
        if taught is not None:
            steps.append(limiter._learn_steps(reservation.route, taught))
        return steps

    def settle(self, reservation: Reservation | None, **outcome: Any) -> None:
        self.queue(self.settle_steps(reservation, **outcome))

    def reserve(
        self, route: Provider, reservation: Reservation, *, wait: bool = True
    ) -> Generator[Any, Any, Grant]:
        """``yield from run.reserve(...)``: the grant of ``reservation`` on ``route``, asked of
        the driver; cut short before the answer (a round trip cancelled half-way), the lease
        it may hold and the route's permit are given back."""
        step = limits.reserve_steps(self.ctx, self.stages, reservation, wait=wait)
        try:
            return (yield from answer_of(step))
        except BaseException:
            self.settle(reservation)
            self.release(route)
            raise

    def give_back_steps(self, route: Provider, reservation: Reservation | None) -> list[Step[Any]]:
        """An attempt that ended without an outcome after its request was sent: its permit
        back, its tokens kept, its lease back."""
        return self.release_steps(route) + self.settle_steps(reservation, sent=True)

    # -- streams ------------------------------------------------------------------------------

    def emitted(self, chunk: StreamChunk) -> StreamChunk | None:
        """``chunk`` as it goes to the caller, or None to skip one that carries nothing (a
        retry's or the next route's role-only opening chunk: its headers, the provider's for
        that attempt, go on that route's next chunk, so the caller learns who answers; its
        answer's fields, ``created`` and the like, are the stream's once given, and carried
        where not given yet: Azure's first chunk, its filter results, has none of them); one
        that carries other metadata (a refusal's piece, logprobs) carries something."""
        metadata = chunk.metadata
        fields = metadata.get(COMPLETION_FIELDS) if metadata else None
        fields = fields.keys() if isinstance(fields, Mapping) else frozenset()
        empty = not (
            chunk.text
            or chunk.tool_calls
            or chunk.finish_reason
            or chunk.usage
            or (metadata and (len(metadata) > 1 or COMPLETION_FIELDS not in metadata))
            or not fields <= self._given
        )
        if empty and self._emitted:
            if chunk.headers:
                self._held_headers = (chunk.route, chunk.headers)
            return None
        self._emitted = True
        if fields:
            self._given = self._given | fields
        held, self._held_headers = self._held_headers, None
        if held is not None and held[0] == chunk.route and not chunk.headers:
            return chunk.model_copy(update={"headers": held[1]})
        return chunk

    # -- leaving a route ------------------------------------------------------------------------

    def leave_route(
        self, route: Provider, error: ProviderError, order: list[Provider] | None = None
    ) -> None:
        """After a route's last attempt: continue an interrupted stream on the next route,
        or fall through to it (raising when the next route must not be tried). A canary
        call whose candidate refused its request as wrong skips the candidate's routes left
        (``order``: the routes left, narrowed in place) for the current release's."""
        ctx = self.ctx
        if self.interrupted is not None and not self.delivered:
            # A continuation failed: the caller has text, so the error to raise stays the
            # interruption; try the next route only when this failure was the route's fault.
            ctx.route_errors[route.name] = error
            if not routes.is_route_failure(error):
                raise self.interrupted from error
            return
        if (
            self.stages.continue_streams
            and self.delivered
            and not self.delivered_tool_call  # (cut JSON: no route continues a call's arguments)
            and isinstance(error, StreamInterruptedError)
        ):
            ctx.route_errors[route.name] = error
            error.partial_text = self.delivered_text
            self.interrupted = error
            self.carried = self.delivered_text
            self.carried_metadata = self.delivered_metadata
            self.request = routes.continuation_request(ctx.request, self.carried)
            ctx.continue_with(self.request)
            self._within_release(route, order)
            return
        if routes.fall_through(
            ctx, route, error, delivered=self.delivered, moves_on=self.stages.moves_on
        ):
            self.skip_to_current(order)

    def _within_release(self, route: Provider, order: list[Provider] | None) -> None:
        """A canary call's stream that delivered its candidate's text is continued by the
        candidate's routes alone: its fallback routes (the current release's: another prompt,
        other parameters) are not tried (counted as used up, taken out of ``order``), and the
        interruption is raised when no candidate route is left."""
        if not routes.on_candidate(self.ctx, route):
            return
        fallback = {r.name for r in self.ctx.fallback_routes}
        self.tried.update(fallback)
        if order is not None:
            order[:] = [r for r in order if r.name not in fallback]

    def skip_to_current(self, order: list[Provider] | None = None) -> None:
        """A canary call's candidate refused its request as wrong (see
        :func:`~.routes.fall_through`): its routes left are not tried (counted as used up,
        and taken out of ``order``), its fallback routes are next."""
        fallback = {r.name for r in self.ctx.fallback_routes}
        self.tried.update(r.name for r in self.stages.routes if r.name not in fallback)
        if order is not None:
            order[:] = [r for r in order if r.name in fallback]

    def no_route_left(self) -> Generator[Any, Any, ChatResponse]:
        """A stale or degraded answer when no route served the call, else the error. The
        stale lookup (a store read, maybe an embedding) is a :class:`~.ops.Blocking` op:
        an async call does it in a worker thread, not on the event loop."""
        if self.interrupted is not None:
            raise self.interrupted  # the caller has text: say so, with all of it
        ctx, stages = self.ctx, self.stages
        stale = not self.stale_looked_up
        if stages.cache is not None and stale:
            degraded: ChatResponse | None = yield Blocking(
                lambda: routes.degraded_response(ctx, stages, keyed=self.keys)
            )
        else:
            degraded = routes.degraded_response(ctx, stages, stale=stale)
        if degraded is None:
            raise routes.failure(self.ctx, self.stages)
        return degraded

    def stale_in_place_of(self, route: Provider) -> Generator[Any, Any, ChatResponse | None]:
        """An expired cached answer served in place of ``route`` where it stands in for the
        routes before it (a local model behind remote ones, see
        :func:`~.routes.stands_in`): the remote model's own answer to the question, if
        only expired, is better than a small model's. Looked up once a call, not after a
        stream delivered text."""
        ctx, stages = self.ctx, self.stages
        if (
            stages.cache is None
            or self.stale_looked_up
            or self.delivered
            or self.interrupted is not None
            or not routes.stands_in(ctx, stages, route)
        ):
            return None
        self.stale_looked_up = True
        found: ChatResponse | None = yield Blocking(
            lambda: routes.stale_response(ctx, stages, self.keys)
        )
        return found

    def route_order(self, winner: Provider | None) -> list[Provider]:
        """The routes still to try: a race's winner first, without the routes it used up."""
        left = [r for r in routes.call_routes(self.ctx, self.stages) if r.name not in self.tried]
        if winner is not None:
            left = [winner] + [r for r in left if r is not winner]
        return left

    def moved_order(self, moved: Sequence[Provider]) -> list[Provider]:
        """The routes a budget moved the call to mid-call, in the order a call sent to them
        at its reservation takes them (its ranking, its tier's), none it reached before."""
        narrowed = dataclasses.replace(self.stages, routes=tuple(moved))
        ranked = routes.call_routes(self.ctx, narrowed)
        return [r for r in ranked if r in moved and r.name not in self.tried]


def elapsed_since(started: float) -> float:
    """Seconds since ``started`` (a :func:`time.monotonic` reading)."""
    return time.monotonic() - started


def _out_of_time_unsent(ctx: CallContext, error: ProviderError) -> bool:
    """Whether ``error`` is the call's own lack of time, not the route's failure: a timeout
    whose request never went out, with the call's deadline passed (an input filter, a cache
    lookup or a rate-limit wait spent it; a connect that timed out while time was left is
    the route's)."""
    return (
        isinstance(error, ProviderTimeoutError) and not error.request_sent and ctx.remaining() <= 0
    )
