"""Guarded streams: iterate chunks as they arrive, get the assembled response at the end.

A stream walks the fallback chain like a plain call, but only until the first content reaches
the caller: after that, a broken stream raises
:class:`~llmguard_sdk.errors.StreamInterruptedError` and is never replayed (the caller would see
the text twice).

Round trips: a stream opens with the batch of a plain call (:func:`pipeline.open_call
<llmguard_sdk.pipeline.open_call>`: cache lookup, spend reserve, the first route's permit and
rate-limit reservation taken ahead) before its provider call, and its decisions that need no
answer (breaker records, rate-limit settles and learning, the retry budget's request count,
the spend settle, the cache store, the give-backs) wait in the call's
:class:`~llmguard_sdk.pipeline.Tail`, sent in one batch after the last chunk (or when the
stream is closed): two round trips when all goes well, none between chunks.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from . import chain, pipeline
from .breaker import Permit
from .budget.control import Held, SpendControl
from .context import AttemptRecord, CallContext
from .errors import ProviderError, ProviderTimeoutError, RateLimitedError, StreamInterruptedError
from .models import ChatResponse, StreamChunk, Usage
from .pipeline import Ahead, OpeningOutcome, Reservation, Stages, Tail
from .providers.base import Provider
from .ratelimit import Grant
from .retry.policy import Decision
from .store import delegate
from .tokens import count_text_tokens

__all__ = ["AsyncChatStream", "ChatStream"]


class _Assembler:
    """Collects one route's chunks into the response they add up to.

    ``carried`` is text an interrupted earlier route already delivered; this route continues
    it, and ``delivered`` counts only this route's own content.
    """

    def __init__(
        self, ctx: CallContext, carried: str = "", record: AttemptRecord | None = None
    ) -> None:
        self._ctx = ctx
        self._carried = carried
        self.record = record or AttemptRecord("")
        self._started = self.record.started
        self._first_token_at: float | None = None
        self._last_content_at = 0.0
        self._text: list[str] = []
        self._tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.model = ""
        self.id: str | None = None
        self.metadata: dict[str, Any] = {}
        self.headers: dict[str, str] = {}

    @property
    def delivered(self) -> bool:
        """Whether any content (text or tool call) has gone to the caller."""
        return bool(self._text or self._tool_calls)

    def add(self, chunk: StreamChunk) -> None:
        if chunk.text:
            now = time.monotonic()
            if self._first_token_at is None:
                self._first_token_at = self.record.first_token_at = now
                if self._ctx.first_token_at is None:
                    self._ctx.first_token_at = self._first_token_at
            else:
                self.record.chunk_gaps.append(now - self._last_content_at)
            self._last_content_at = now
            self._text.append(chunk.text)
        if chunk.tool_calls:
            merge_tool_call_deltas(self._tool_calls, chunk.tool_calls)
        self.finish_reason = chunk.finish_reason or self.finish_reason
        self.usage = chunk.usage or self.usage
        self.model = chunk.model or self.model
        self.id = chunk.id or self.id
        if chunk.metadata:
            self.metadata.update(chunk.metadata)
        if chunk.headers:
            self.headers.update(chunk.headers)

    def seconds(self) -> float:
        """How long this attempt took to its first token (or until now, without one)."""
        return (self._first_token_at or time.monotonic()) - self._started

    @property
    def text(self) -> str:
        """Everything the caller has received: carried text and this route's."""
        return self._carried + "".join(self._text)

    def response(self, route: str) -> ChatResponse:
        return ChatResponse(
            text=self.text,
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
            route=route,
            id=self.id,
            tool_calls=[self._tool_calls[i] for i in sorted(self._tool_calls)] or None,
            headers=dict(self.headers),
            metadata=dict(self.metadata),
        )

    def limit_steps(
        self, reservation: Reservation, error: ProviderError | None = None
    ) -> tuple[dict[str, Any] | None, dict[str, float] | None]:
        """(settle arguments, learn arguments) for this attempt's rate-limit reservation.

        It settles to the provider's usage, else to the SDK's count of what was delivered;
        a failure before any content gives everything back; a stream closed before its
        first content keeps its input tokens (the prompt was sent). A 429 teaches its pause,
        an answer's headers the provider's counters.
        """
        if reservation.done:
            return None, None
        own = "".join(self._text)
        if self.usage is not None:
            reservation.used = self.usage
        elif self.delivered or error is None:
            output = count_text_tokens(own, reservation.route).tokens if own else 0
            reservation.used = Usage(
                input_tokens=int(reservation.input), output_tokens=output, estimated=True
            )
        taught: dict[str, float] | None = None
        if isinstance(error, RateLimitedError):
            taught = {"pause": error.retry_after or 0.0}
        elif error is None:
            taught = pipeline.learned(self.headers)
        return pipeline.settle_args(reservation), taught


def merge_tool_call_deltas(calls: dict[int, dict[str, Any]], deltas: list[dict[str, Any]]) -> None:
    """Fold streamed tool-call pieces into whole calls, keyed by their ``index``.

    A stream sends each call's ``id``, ``type`` and ``function.name`` once and its
    ``function.arguments`` in pieces to be joined, as OpenAI's streaming format does.
    """
    for position, delta in enumerate(deltas):
        index = delta.get("index")
        key = index if isinstance(index, int) else position
        call = calls.setdefault(key, {"id": None, "type": "function", "function": {}})
        for key_name in ("id", "type"):
            if isinstance(delta.get(key_name), str) and delta[key_name]:
                call[key_name] = delta[key_name]
        function = delta.get("function")
        if isinstance(function, dict):
            merged = call["function"]
            if isinstance(function.get("name"), str) and function["name"]:
                merged["name"] = function["name"]
            if isinstance(function.get("arguments"), str):
                merged["arguments"] = merged.get("arguments", "") + function["arguments"]


class _Seen:
    """What a budgeted stream delivered, for settling one that ended early."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.usage: Usage | None = None

    def add(self, chunk: StreamChunk) -> None:
        if chunk.text:
            self.text.append(chunk.text)
        self.usage = chunk.usage or self.usage

    def partial(self, spend: SpendControl, ctx: CallContext, held: Held) -> ChatResponse | None:
        return spend.partial(ctx, held.stages, "".join(self.text), self.usage)


class _StreamBase:
    """What both stream twins share: the final response and the one event they emit."""

    def __init__(self, ctx: CallContext, stages: Stages) -> None:
        self._ctx = ctx
        self._stages = stages
        self._response: ChatResponse | None = None
        self._ended = False
        self._close_requested = False
        self._request = ctx.request  # replaced by a continuation request after an interruption
        self._carried = ""
        self._interrupted: StreamInterruptedError | None = None
        self._yielded = False
        self._tried: set[str] = set()  # routes a hedge race already used up
        self._winner_first: Provider | None = None
        self._winner_reservation: Reservation | None = None
        self._tail = Tail()  # decisions that need no answer: sent after the last chunk
        self._ahead: Ahead | None = None  # the first route's permit and reservation
        self._opening: OpeningOutcome | None = None
        self._seen = _Seen()

    @property
    def response(self) -> ChatResponse:
        """The assembled response, once the stream has been read to its end."""
        if self._response is None:
            raise RuntimeError("the stream has not been read to its end yet")
        return self._response

    def _end(self, *, error: BaseException | None = None, cancelled: bool = False) -> None:
        if self._ended:
            return
        self._ended = True
        pipeline.report(
            self._ctx,
            self._stages,
            "stream",
            response=self._response,
            error=error,
            cancelled=cancelled,
        )

    def _hedge_candidates(self) -> list[Provider]:
        """The usable routes, when this call hedges and has two of them (else none)."""
        if self._ctx.hedge_after is None:
            return []
        usable = [r for r in self._stages.routes if not pipeline.too_small_for(self._ctx, r)]
        return usable if len(usable) >= 2 else []

    def _refused(self, route: Provider, permit: Permit) -> None:
        pipeline.route_refused(self._ctx, self._stages, route, permit)
        self._tried.add(route.name)

    def _after_race(self, race: _Race) -> dict[str, Any]:
        """Record what the race decided; the winner's stream, keyed by its route, if any."""
        if race.unexpected is not None:
            raise race.unexpected
        self._ctx.attempts += race.started - (1 if race.winner is not None else 0)
        self._tried.update(race.errors)
        self._tried.update(loser.name for loser in race.losers)
        self._tried.update(refused.name for refused in race.refused)
        if race.winner is not None:
            self._ctx.route_errors.update(race.errors)
            self._winner_first = race.winner
            self._winner_reservation = race.reservations.get(race.winner.name)
            return {race.winner.name: race.chunks}
        by_name = {route.name: route for route in self._stages.routes}
        for name, error in race.errors.items():
            pipeline.fall_through(
                self._ctx, by_name[name], error, delivered=False, moves_on=self._stages.moves_on
            )
        return {}

    def _route_order(self, preopened: dict[str, Any]) -> list[Provider]:
        """The routes still to try: a race's winner first, without the routes it used up."""
        routes = [r for r in self._stages.routes if r.name not in self._tried]
        winner = self._winner_first
        if winner is not None and winner.name in preopened:
            routes = [winner] + [r for r in routes if r is not winner]
        return routes

    def _settle_limit(
        self,
        reservation: Reservation | None,
        assembler: _Assembler | None,
        error: ProviderError | None = None,
    ) -> None:
        """Settle an attempt's rate-limit reservation once (see
        :meth:`_Assembler.limit_steps`; without an assembler nothing was sent)."""
        limiter = self._stages.limiter
        if reservation is None or limiter is None or reservation.done:
            return
        if assembler is None:
            args, taught = pipeline.settle_args(reservation), None
        else:
            args, taught = assembler.limit_steps(reservation, error)
        if args is not None:
            self._tail.add(delegate(limiter, "settle", reservation.route, **args))
        if taught is not None:
            self._tail.add(delegate(limiter, "learn", reservation.route, **taught))

    # -- the call's shared state: taken ahead, asked with what waits, or deferred ---------

    def _opened(self, opening: OpeningOutcome) -> ChatResponse | None:
        """Take over the opening batch's decisions (see :meth:`OpeningOutcome.begin`): a
        cached answer, or None when the stream goes to its routes (under the spend hold's
        stages, when a budget holds it). A hit or a refusal has queued its give-backs
        already; only a stream that goes to its routes owes :meth:`_closing` anything."""
        self._tail, self._ahead = opening.tail, opening.ahead
        cached = opening.begin(self._ctx, self._stages)
        if cached is None:
            self._opening = opening
            if opening.held is not None:
                self._stages, self._request = opening.held.stages, self._ctx.request
        return cached

    def _watch(self, chunk: StreamChunk) -> None:
        """Note what a budgeted stream delivered (to settle one that ends early)."""
        if self._opening is not None and self._opening.held is not None:
            self._seen.add(chunk)

    def _closing(self, stages: Stages) -> None:
        """Queue what the stream's end still owes: the give-back of what was taken ahead
        and not used, and the spend settle (to the final response, else to what was
        delivered; nothing delivered: the hold is released)."""
        opening = self._opening
        if opening is None:
            return
        self._give_back_ahead()
        held, spend = opening.held, stages.spend
        if held is not None and spend is not None and not held.done:
            served = self._response or self._seen.partial(spend, self._ctx, held)
            self._tail.add(spend.settle_steps(held, self._ctx, served))

    def _give_back_ahead(self) -> None:
        if self._ahead is not None:
            for step in self._ahead.leftovers(self._stages):
                self._tail.add(step)

    def _from_ahead(self, op: chain.Op) -> tuple[bool, Any]:
        return chain.from_ahead(op, self._ahead, self._stages, self._tail)

    def _first_leg(self, route: Provider) -> tuple[Reservation | None, Grant | None]:
        """A hedge race's first leg, when its reservation was taken ahead: (the
        reservation, its grant); (None, None) and the race reserves it itself."""
        reservation = pipeline.token_reservation(self._ctx, self._stages, route)
        if reservation is None:
            return None, None
        found, grant = self._from_ahead(chain.Op("reserve", route, reservation=reservation))
        return (reservation, grant) if found else (None, None)

    def _leg_refused(self, route: Provider, grant: Grant) -> None:
        """The first leg's rate limit had no room: as a race whose first leg was refused."""
        pipeline.route_rate_limited(self._ctx, route, grant)
        self._release(route)
        self._tried.add(route.name)

    def _count_request(self, route: Provider) -> None:
        """The retry budget's request count for ``route`` (deferred: it needs no answer)."""
        if self._stages.budget is not None:
            self._tail.add(delegate(self._stages.budget, "record_request", route.name))

    def _record(self, route: Provider, error: ProviderError | None, seconds: float) -> None:
        """The breaker's record of an attempt's outcome (deferred)."""
        if self._stages.breakers is not None:
            self._tail.add(self._stages.breakers.record_steps(route.name, error, seconds=seconds))

    def _release(self, route: Provider) -> None:
        """Give back a breaker permit whose attempt has no outcome (deferred)."""
        if self._stages.breakers is not None:
            self._tail.add(self._stages.breakers.release_steps(route.name))

    def _worth_yielding(self, chunk: StreamChunk) -> bool:
        """Skip chunks that carry nothing (a retry's second role-only opening chunk)."""
        empty = not (chunk.text or chunk.tool_calls or chunk.finish_reason or chunk.usage)
        if empty and self._yielded:
            return False
        self._yielded = True
        return True

    def _start_attempt(self, route_name: str) -> _Assembler:
        self._ctx.attempts += 1
        self._ctx.route = route_name
        return _Assembler(self._ctx, self._carried, self._ctx.begin_attempt(route_name))

    def _plan_retry(
        self, exc: ProviderError, assembler: _Assembler, attempt: int, previous_wait: float
    ) -> Decision:
        self._ctx.route = None
        assembler.record.end(exc)
        return pipeline.retry_after_failure(
            self._ctx,
            self._stages,
            exc,
            attempt=attempt,
            previous_wait=previous_wait,
            delivered=assembler.delivered,
        )

    def _leave_route(self, route: Provider, exc: ProviderError, assembler: _Assembler) -> None:
        """After a route's last attempt: continue on the next route, or fall through."""
        if self._interrupted is not None and not assembler.delivered:
            # A continuation failed: the caller has text, so the error to raise stays the
            # interruption; try the next route only when this failure was the route's fault.
            self._ctx.route_errors[route.name] = exc
            if not pipeline.is_route_failure(exc):
                raise self._interrupted from exc
            return
        if (
            self._stages.continue_streams
            and assembler.delivered
            and isinstance(exc, StreamInterruptedError)
        ):
            self._ctx.route_errors[route.name] = exc
            exc.partial_text = assembler.text
            self._interrupted = exc
            self._carried = assembler.text
            self._request = pipeline.continuation_request(self._ctx.request, self._carried)
            return
        pipeline.fall_through(self._ctx, route, exc, delivered=assembler.delivered)

    def _degraded(self) -> StreamChunk | None:
        """The stale cached or degraded answer as one chunk (and the response), if any."""
        if self._interrupted is not None:
            return None
        response = pipeline.degraded_response(self._ctx, self._stages)
        return None if response is None else self._as_chunk(response)

    def _as_chunk(self, response: ChatResponse) -> StreamChunk:
        """A whole answer not from a provider stream (degraded, cached) as one chunk; it
        becomes the stream's response."""
        self._response = pipeline.finish(self._ctx, self._stages, response)
        return StreamChunk(
            text=response.text,
            finish_reason=response.finish_reason,
            usage=response.usage,
            route=response.route,
            metadata=response.metadata,
        )

    def _no_route_left(self) -> Exception:
        if self._interrupted is not None:
            return self._interrupted  # the caller has text: say so, with all of it
        return pipeline.failure(self._ctx, self._stages)

    def _finish_route(self, assembler: _Assembler, route_name: str) -> None:
        assembler.record.end()
        response = assembler.response(route_name)
        if self._carried:
            continued = [
                name
                for name, e in self._ctx.route_errors.items()
                if isinstance(e, StreamInterruptedError)
            ]
            metadata = {**response.metadata, "continued_after": continued}
            response = response.model_copy(update={"metadata": metadata})
        self._response = pipeline.finish(self._ctx, self._stages, response)


class ChatStream(_StreamBase):
    """An iterator of :class:`~llmguard_sdk.models.StreamChunk` from :meth:`Guard.chat`.

    Use it in a ``with`` block (or call :meth:`close`) so that a stream you stop reading
    early releases its connection. :attr:`response` holds the assembled answer, with usage and
    timings, after the last chunk.
    """

    def __init__(self, ctx: CallContext, stages: Stages) -> None:
        super().__init__(ctx, stages)
        self._chunks = self._guarded()

    def _guarded(self) -> Generator[StreamChunk, None, None]:
        """The stream between its two round trips: the opening batch (a cache hit is
        replayed as one chunk, a refusal raised), the routes' chunks as they come, then one
        batch with the tail: records, settles, the spend settle and the cache store (also
        when the stream ends early or fails)."""
        stages = self._stages
        chunks: Generator[StreamChunk, None, None] | None = None
        try:
            cached = self._opened(pipeline.open_call(self._ctx, stages))
            if cached is not None:
                yield self._as_chunk(cached)
                return
            chunks = self._run()
            for chunk in chunks:
                self._watch(chunk)
                yield chunk
            if self._response is not None:
                pipeline.remember_later(self._ctx, stages, self._response, self._tail)
        finally:
            if chunks is not None:
                chunks.close()
            self._closing(stages)
            self._tail.flush()

    def _permit(self, route: Provider) -> Permit:
        """``route``'s breaker permit: taken ahead, else asked with what waits."""
        found, permit = self._from_ahead(chain.Op("permit", route))
        if found:
            return permit  # type: ignore[no-any-return]
        assert self._stages.breakers is not None
        return self._tail.ask(self._stages.breakers.permit_steps(route.name))

    def _reserve(self, route: Provider, reservation: Reservation) -> Grant:
        """``route``'s rate-limit reservation: taken ahead, else asked with what waits."""
        found, grant = self._from_ahead(chain.Op("reserve", route, reservation=reservation))
        if found:
            return grant  # type: ignore[no-any-return]
        return self._tail.ask(pipeline.reserve_steps(self._ctx, self._stages, reservation))

    def _sleep(self, seconds: float) -> None:
        """Wait (what waits in the tail goes out first)."""
        self._tail.flush()
        if seconds > 0:
            time.sleep(seconds)

    def _run(self) -> Generator[StreamChunk, None, None]:
        budget, breakers, limiter = self._stages.budget, self._stages.breakers, self._stages.limiter
        preopened: dict[str, Generator[StreamChunk, None, None]] = {}
        usable = self._hedge_candidates()
        for index, first in enumerate(usable[:-1]):
            permit = self._permit(first) if breakers is not None else None
            if permit is not None and not permit.allowed:
                self._refused(first, permit)
                continue
            leg, grant = self._first_leg(first)
            self._give_back_ahead()  # the rest: the race reserves its other leg itself
            if grant is not None and not grant.allowed:
                self._leg_refused(first, grant)
                break
            self._sleep(grant.wait if grant is not None else 0.0)
            pair = (first, usable[index + 1])
            race = race_sync(self._ctx, self._stages, self._request, pair, first_leg=leg)
            preopened = self._after_race(race)
            break
        for route in self._route_order(preopened):
            if pipeline.too_small_for(self._ctx, route):
                continue
            self._count_request(route)
            attempt, previous_wait, previous = 0, 0.0, None
            while True:
                raced = preopened.pop(route.name, None)
                if raced is None and breakers is not None:
                    permit = self._permit(route)
                    if not permit.allowed:
                        pipeline.route_refused(self._ctx, self._stages, route, permit)
                        break
                reservation = (
                    self._winner_reservation
                    if raced
                    else pipeline.token_reservation(self._ctx, self._stages, route)
                )
                if reservation is not None and limiter is not None and not reservation.granted:
                    grant = self._reserve(route, reservation)
                    if not grant.allowed:
                        pipeline.route_rate_limited(self._ctx, route, grant)
                        self._release(route)
                        break
                    if grant.wait > 0:  # our slot lies a little ahead: wait for it
                        self._ctx.rate_wait_s += grant.wait
                        self._sleep(grant.wait)
                attempt += 1
                assembler = self._start_attempt(route.name)
                chunks = raced or route.stream(
                    self._request,
                    model=pipeline.route_model(route, self._request),
                    deadline=self._ctx.deadline,
                    idle_timeout=self._stages.attempt_timeout,
                )
                finished = recorded = False
                try:
                    for chunk in chunks:
                        assembler.add(chunk)
                        if self._worth_yielding(chunk):
                            yield chunk
                    finished = True
                except ProviderError as failure:
                    self._settle_limit(reservation, assembler, failure)
                    self._record(route, failure, assembler.seconds())
                    recorded = True
                    exc = previous = pipeline.real_error(failure, previous)
                    decision = self._plan_retry(exc, assembler, attempt, previous_wait)
                    if (
                        decision.retry
                        and (
                            budget is None
                            or self._tail.ask(delegate(budget, "try_spend", route.name))
                        )
                        and pipeline.still_fits(self._ctx, decision)
                    ):
                        self._sleep(pipeline.note_retry(self._ctx, route, exc, attempt, decision))
                        previous_wait = decision.wait
                        continue
                    self._leave_route(route, exc, assembler)
                    break
                finally:
                    chunks.close()
                    if not (finished or recorded):
                        self._release(route)  # closed early: no outcome to record
                    self._settle_limit(reservation, assembler)  # closed early, or the end
                self._record(route, None, assembler.seconds())
                self._finish_route(assembler, route.name)
                return
        degraded = self._degraded()
        if degraded is None:
            raise self._no_route_left()
        yield degraded

    def __iter__(self) -> Iterator[StreamChunk]:
        return self

    def __next__(self) -> StreamChunk:
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self._end()
            raise
        except BaseException as exc:
            self._end(error=exc)
            raise
        if self._close_requested:  # close() came from another thread while we waited
            self.close()
            raise StopIteration
        return chunk

    def close(self) -> None:
        """Stop the stream and release its connection.

        Called from another thread while a reader waits for the next chunk, it takes effect
        when that chunk arrives (or the deadline passes): the reader's loop then ends.
        """
        if getattr(self._chunks, "gi_running", False):
            self._close_requested = True
            return
        self._chunks.close()
        self._end(cancelled=self._response is None)

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncChatStream(_StreamBase):
    """The async twin of :class:`ChatStream`, from :meth:`Guard.achat`.

    Iterate it with ``async for``; use ``async with`` (or ``await stream.aclose()``) to
    release the connection of a stream you stop reading early.
    """

    def __init__(self, ctx: CallContext, stages: Stages) -> None:
        super().__init__(ctx, stages)
        self._chunks = self._guarded()

    async def _guarded(self) -> AsyncGenerator[StreamChunk, None]:
        """Async twin of :meth:`ChatStream._guarded` (its end is shielded from
        cancellation)."""
        stages = self._stages
        chunks: AsyncGenerator[StreamChunk, None] | None = None
        try:
            cached = self._opened(await pipeline.aopen_call(self._ctx, stages))
            if cached is not None:
                yield self._as_chunk(cached)
                return
            chunks = self._run()
            async for chunk in chunks:
                self._watch(chunk)
                yield chunk
            if self._response is not None:
                await pipeline.aremember_later(self._ctx, stages, self._response, self._tail)
        finally:
            with anyio.CancelScope(shield=True):
                if chunks is not None:
                    await chunks.aclose()
                self._closing(stages)
                await self._tail.aflush()

    async def _permit(self, route: Provider) -> Permit:
        """Async twin of :meth:`ChatStream._permit`."""
        found, permit = self._from_ahead(chain.Op("permit", route))
        if found:
            return permit  # type: ignore[no-any-return]
        assert self._stages.breakers is not None
        return await self._tail.aask(self._stages.breakers.permit_steps(route.name))

    async def _reserve(self, route: Provider, reservation: Reservation) -> Grant:
        """Async twin of :meth:`ChatStream._reserve`."""
        found, grant = self._from_ahead(chain.Op("reserve", route, reservation=reservation))
        if found:
            return grant  # type: ignore[no-any-return]
        return await self._tail.aask(pipeline.reserve_steps(self._ctx, self._stages, reservation))

    async def _sleep(self, seconds: float) -> None:
        """Async twin of :meth:`ChatStream._sleep`."""
        await self._tail.aflush()
        if seconds > 0:
            await anyio.sleep(seconds)

    async def _run(self) -> AsyncGenerator[StreamChunk, None]:
        budget, breakers, limiter = self._stages.budget, self._stages.breakers, self._stages.limiter
        preopened: dict[str, AsyncGenerator[StreamChunk, None]] = {}
        usable = self._hedge_candidates()
        for index, first in enumerate(usable[:-1]):
            permit = await self._permit(first) if breakers is not None else None
            if permit is not None and not permit.allowed:
                self._refused(first, permit)
                continue
            leg, grant = self._first_leg(first)
            self._give_back_ahead()  # the rest: the race reserves its other leg itself
            if grant is not None and not grant.allowed:
                self._leg_refused(first, grant)
                break
            try:
                await self._sleep(grant.wait if grant is not None else 0.0)
            except BaseException:  # cancelled while waiting: nothing was sent
                self._settle_limit(leg, None)
                self._release(first)
                raise
            pair = (first, usable[index + 1])
            race = await race_async(self._ctx, self._stages, self._request, pair, first_leg=leg)
            preopened = self._after_race(race)
            break
        for route in self._route_order(preopened):
            if pipeline.too_small_for(self._ctx, route):
                continue
            self._count_request(route)
            attempt, previous_wait, previous = 0, 0.0, None
            while True:
                raced = preopened.pop(route.name, None)
                if raced is None and breakers is not None:
                    permit = await self._permit(route)
                    if not permit.allowed:
                        pipeline.route_refused(self._ctx, self._stages, route, permit)
                        break
                reservation = (
                    self._winner_reservation
                    if raced
                    else pipeline.token_reservation(self._ctx, self._stages, route)
                )
                if reservation is not None and limiter is not None and not reservation.granted:
                    grant = await self._reserve(route, reservation)
                    if not grant.allowed:
                        pipeline.route_rate_limited(self._ctx, route, grant)
                        self._release(route)
                        break
                    if grant.wait > 0:  # our slot lies a little ahead: wait for it
                        self._ctx.rate_wait_s += grant.wait
                        try:
                            await self._sleep(grant.wait)
                        except BaseException:  # cancelled while waiting: nothing was sent
                            self._settle_limit(reservation, None)
                            self._release(route)
                            raise
                attempt += 1
                assembler = self._start_attempt(route.name)
                chunks = raced or route.astream(
                    self._request,
                    model=pipeline.route_model(route, self._request),
                    deadline=self._ctx.deadline,
                    idle_timeout=self._stages.attempt_timeout,
                )
                finished = recorded = False
                try:
                    async for chunk in chunks:
                        assembler.add(chunk)
                        if self._worth_yielding(chunk):
                            yield chunk
                    finished = True
                except ProviderError as failure:
                    self._settle_limit(reservation, assembler, failure)
                    self._record(route, failure, assembler.seconds())
                    recorded = True
                    exc = previous = pipeline.real_error(failure, previous)
                    decision = self._plan_retry(exc, assembler, attempt, previous_wait)
                    if (
                        decision.retry
                        and (
                            budget is None
                            or await self._tail.aask(delegate(budget, "try_spend", route.name))
                        )
                        and pipeline.still_fits(self._ctx, decision)
                    ):
                        wait = pipeline.note_retry(self._ctx, route, exc, attempt, decision)
                        await self._sleep(wait)
                        previous_wait = decision.wait
                        continue
                    self._leave_route(route, exc, assembler)
                    break
                finally:
                    with anyio.CancelScope(shield=True):
                        await chunks.aclose()
                    if not (finished or recorded):
                        self._release(route)  # closed early: no outcome
                    self._settle_limit(reservation, assembler)  # closed early, or the end
                self._record(route, None, assembler.seconds())
                self._finish_route(assembler, route.name)
                return
        degraded = self._degraded()
        if degraded is None:
            raise self._no_route_left()
        yield degraded

    def __aiter__(self) -> AsyncIterator[StreamChunk]:
        return self

    async def __anext__(self) -> StreamChunk:
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            self._end()
            raise
        except BaseException as exc:
            self._end(error=exc)
            raise
        if self._close_requested:  # aclose() came from another task while we waited
            await self.aclose()
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        """Stop the stream and release its connection.

        Called from another task while the reader waits for the next chunk, it takes effect
        when that chunk arrives (or the deadline passes): the reader's loop then ends. To stop
        at once, cancel the reading task instead.
        """
        if getattr(self._chunks, "ag_running", False):
            self._close_requested = True
            return
        await self._chunks.aclose()
        self._end(cancelled=self._response is None)

    async def __aenter__(self) -> AsyncChatStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


# -- hedged streams: race two routes to their first content, then stream the winner ---------


def _has_content(chunk: StreamChunk) -> bool:
    return bool(chunk.text or chunk.tool_calls or chunk.finish_reason)


@dataclass
class _Runner:
    """One route's stream while it races: its chunks so far, and how it ended."""

    route: Provider
    buffered: list[StreamChunk] = field(default_factory=list)
    error: ProviderError | None = None
    unexpected: BaseException | None = None
    ready: bool = False


@dataclass
class _Race:
    """The outcome of a race: the winner's stream (buffered chunks first), or the errors."""

    winner: Provider | None = None
    chunks: Any = None
    errors: dict[str, ProviderError] = field(default_factory=dict)
    losers: list[Provider] = field(default_factory=list)
    started: int = 0
    unexpected: BaseException | None = None
    refused: list[Provider] = field(default_factory=list)  # no rate-limit room: not started
    reservations: dict[str, Reservation | None] = field(default_factory=dict)


def _replay(
    buffered: list[StreamChunk], rest: Generator[StreamChunk, None, None]
) -> Generator[StreamChunk, None, None]:
    try:
        yield from buffered
        yield from rest
    finally:
        rest.close()


async def _areplay(
    buffered: list[StreamChunk], rest: AsyncGenerator[StreamChunk, None]
) -> AsyncGenerator[StreamChunk, None]:
    try:
        for chunk in buffered:
            yield chunk
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()


def _reserve_leg(
    ctx: CallContext, stages: Stages, route: Provider, *, wait: bool
) -> tuple[bool, Reservation | None]:
    """A race leg's rate-limit reservation: (may start, the reservation). The first leg may
    wait for its slot; the second may not (a hedge that waited would defeat its purpose).
    A leg without room gives its breaker permit back."""
    leg = pipeline.token_reservation(ctx, stages, route)
    if leg is None or stages.limiter is None:
        return True, None
    grant = stages.limiter.reserve(route.name, **pipeline.reserve_args(ctx, leg, wait=wait))
    pipeline.granted(leg, grant)
    if not grant.allowed:
        pipeline.route_rate_limited(ctx, route, grant)
        if stages.breakers is not None:
            stages.breakers.release(route.name)
        return False, None
    time.sleep(grant.wait)
    return True, leg


async def _areserve_leg(
    ctx: CallContext, stages: Stages, route: Provider, *, wait: bool
) -> tuple[bool, Reservation | None]:
    """Async twin of :func:`_reserve_leg`."""
    leg = pipeline.token_reservation(ctx, stages, route)
    if leg is None or stages.limiter is None:
        return True, None
    grant = await stages.limiter.areserve(route.name, **pipeline.reserve_args(ctx, leg, wait=wait))
    pipeline.granted(leg, grant)
    if not grant.allowed:
        pipeline.route_rate_limited(ctx, route, grant)
        if stages.breakers is not None:
            await stages.breakers.arelease(route.name)
        return False, None
    try:
        await anyio.sleep(grant.wait)
    except BaseException:
        await _asettle_leg(stages, leg)
        raise
    return True, leg


def _settle_leg(
    stages: Stages, leg: Reservation | None, error: ProviderError | None = None
) -> None:
    """Settle a race leg that will not be streamed: a failed one gives its tokens back (and
    teaches a 429's pause); a loser or a leg cut at the deadline was sent, so it keeps them
    and only gives its concurrency lease back."""
    if leg is None or stages.limiter is None:
        return
    args = pipeline.settle_args(leg, refund=error is not None)
    if args is not None:
        stages.limiter.settle(leg.route, **args)
    if isinstance(error, RateLimitedError):
        stages.limiter.learn(leg.route, pause=error.retry_after or 0.0)


async def _asettle_leg(
    stages: Stages, leg: Reservation | None, error: ProviderError | None = None
) -> None:
    """Async twin of :func:`_settle_leg` (shielded)."""
    if leg is None or stages.limiter is None:
        return
    args = pipeline.settle_args(leg, refund=error is not None)
    with anyio.CancelScope(shield=True):
        if args is not None:
            await stages.limiter.asettle(leg.route, **args)
        if isinstance(error, RateLimitedError):
            await stages.limiter.alearn(leg.route, pause=error.retry_after or 0.0)


def _second_allowed(ctx: CallContext, stages: Stages, second: Provider) -> bool:
    if stages.breakers is None:
        return True
    permit = stages.breakers.permit(second.name)
    if not permit.allowed:
        pipeline.route_refused(ctx, stages, second, permit)
    return permit.allowed


def _hedge_on(stages: Stages, runner: _Runner) -> bool:
    """After the first route failed early: is it a failure that moves the call on?"""
    return runner.error is not None and (stages.moves_on or pipeline.is_route_failure)(runner.error)


def _timed_out(route: Provider) -> ProviderTimeoutError:
    return ProviderTimeoutError(
        "no first token before the call's deadline (hedged)", route=route.name
    )


def race_sync(
    ctx: CallContext,
    stages: Stages,
    request: Any,
    pair: tuple[Provider, Provider],
    *,
    first_leg: Reservation | None = None,
) -> _Race:
    """Race ``pair`` to the first content (the second starts after ``ctx.hedge_after``).

    ``first_leg``: the first route's rate-limit reservation, already granted (taken ahead,
    in the call's first round trip); without it the race reserves it."""
    delay = ctx.hedge_after or 0.0
    events: queue.SimpleQueue[_Runner] = queue.SimpleQueue()
    runners: dict[str, tuple[_Runner, Generator[StreamChunk, None, None], threading.Thread]] = {}
    stop = threading.Event()
    lock = threading.Lock()  # who ends a losing stream: its thread, or this one

    def prefetch(runner: _Runner, chunks: Generator[StreamChunk, None, None]) -> None:
        try:
            for chunk in chunks:
                runner.buffered.append(chunk)
                if _has_content(chunk) or stop.is_set():
                    break
            with lock:
                runner.ready = not stop.is_set()
                if not runner.ready:
                    chunks.close()  # lost the race while waiting: this thread ends it
        except ProviderError as error:
            runner.error = error
        except BaseException as error:  # not a provider failure: re-raised by the caller
            runner.unexpected = error
        finally:
            events.put(runner)

    def start(route: Provider, *, wait: bool) -> bool:
        leg: Reservation | None
        if route is pair[0] and first_leg is not None:
            allowed, leg = True, first_leg
        else:
            allowed, leg = _reserve_leg(ctx, stages, route, wait=wait)
        if not allowed:
            race.refused.append(route)
            return False
        race.reservations[route.name] = leg
        chunks = route.stream(
            request,
            model=pipeline.route_model(route, request),
            deadline=ctx.deadline,
            idle_timeout=stages.attempt_timeout,
        )
        runner = _Runner(route)
        thread = threading.Thread(target=prefetch, args=(runner, chunks), daemon=True)
        runners[route.name] = (runner, chunks, thread)
        race.started += 1
        thread.start()
        return True

    race, hedged = _Race(), False
    if not start(pair[0], wait=True):
        return race
    waiting = 1
    while waiting:
        timeout = min(delay if not hedged else math.inf, ctx.remaining())
        try:
            runner = events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            if hedged or ctx.remaining() <= 0:
                break
            hedged = True
            if _second_allowed(ctx, stages, pair[1]) and start(pair[1], wait=False):
                waiting += 1
            continue
        waiting -= 1
        if runner.unexpected is not None:
            race.unexpected = runner.unexpected
            break
        if runner.ready:
            race.winner = runner.route
            break
        assert runner.error is not None
        race.errors[runner.route.name] = runner.error
        if stages.breakers is not None:
            stages.breakers.record(runner.route.name, runner.error, seconds=0.0)
        _settle_leg(stages, race.reservations.get(runner.route.name), runner.error)
        if not hedged and _hedge_on(stages, runner):
            hedged = True
            if _second_allowed(ctx, stages, pair[1]) and start(pair[1], wait=False):
                waiting += 1
    with lock:
        stop.set()
        finished = {name: (r.ready, r.error, r.unexpected) for name, (r, _, _) in runners.items()}
    for name, (runner, chunks, _thread) in runners.items():
        ready, error, unexpected = finished[name]
        if race.winner is not None and name == race.winner.name:
            race.chunks = _replay(runner.buffered, chunks)
            continue
        if unexpected is not None:
            _settle_leg(stages, race.reservations.get(name))
        if error is not None or unexpected is not None:
            continue
        _settle_leg(stages, race.reservations.get(name))  # a loser, or cut at the deadline
        if ready:
            chunks.close()  # it had content too, a moment late: end it here
        if race.winner is None and race.unexpected is None and ctx.remaining() <= 0:
            race.errors[name] = _timed_out(runner.route)  # still waiting at the deadline
            if stages.breakers is not None:
                stages.breakers.record(name, race.errors[name], seconds=0.0)
            continue
        race.losers.append(runner.route)
        if stages.breakers is not None:
            stages.breakers.release(name)
    return race


async def race_async(
    ctx: CallContext,
    stages: Stages,
    request: Any,
    pair: tuple[Provider, Provider],
    *,
    first_leg: Reservation | None = None,
) -> _Race:
    """Async twin of :func:`race_sync`; the loser is cancelled."""
    delay = ctx.hedge_after or 0.0
    race = _Race()
    settled = anyio.Event()
    waiting = 0
    streams: dict[str, tuple[_Runner, AsyncGenerator[StreamChunk, None]]] = {}

    async def prefetch(runner: _Runner, chunks: AsyncGenerator[StreamChunk, None]) -> None:
        nonlocal waiting
        try:
            async for chunk in chunks:
                runner.buffered.append(chunk)
                if _has_content(chunk):
                    break
            runner.ready = True
            if race.winner is None:
                race.winner = runner.route
        except ProviderError as error:
            runner.error = error
            race.errors[runner.route.name] = error
            if stages.breakers is not None:
                await stages.breakers.arecord(runner.route.name, error, seconds=0.0)
            await _asettle_leg(stages, race.reservations.get(runner.route.name), error)
        except Exception as error:  # not a provider failure: re-raised by the caller
            runner.unexpected = race.unexpected = error
        waiting -= 1
        if race.winner is not None or race.unexpected is not None or waiting == 0:
            settled.set()

    def start(tasks: anyio.abc.TaskGroup, route: Provider, leg: Reservation | None) -> None:
        nonlocal waiting
        race.reservations[route.name] = leg
        chunks = route.astream(
            request,
            model=pipeline.route_model(route, request),
            deadline=ctx.deadline,
            idle_timeout=stages.attempt_timeout,
        )
        runner = _Runner(route)
        streams[route.name] = (runner, chunks)
        race.started += 1
        waiting += 1
        tasks.start_soon(prefetch, runner, chunks)

    allowed = True
    if first_leg is None:
        allowed, first_leg = await _areserve_leg(ctx, stages, pair[0], wait=True)
    if not allowed:
        race.refused.append(pair[0])
        return race
    handed_over = False
    try:
        with anyio.move_on_after(max(0.0, ctx.remaining())):
            async with anyio.create_task_group() as tasks:
                start(tasks, pair[0], first_leg)
                with anyio.move_on_after(delay):
                    await settled.wait()
                first = streams[pair[0].name][0]
                if (
                    race.winner is None
                    and race.unexpected is None
                    and (first.error is None or _hedge_on(stages, first))
                    and (stages.breakers is None or await _asecond_allowed(ctx, stages, pair[1]))
                ):
                    allowed, second_leg = await _areserve_leg(ctx, stages, pair[1], wait=False)
                    if allowed:
                        settled = anyio.Event()
                        start(tasks, pair[1], second_leg)
                if waiting:
                    await settled.wait()
                tasks.cancel_scope.cancel()
        if race.winner is not None and race.unexpected is None:
            runner, chunks = streams[race.winner.name]
            race.chunks = _areplay(runner.buffered, chunks)
            handed_over = True
        return race
    finally:
        with anyio.CancelScope(shield=True):
            for name, (runner, chunks) in streams.items():
                if handed_over and race.winner is not None and name == race.winner.name:
                    continue
                await chunks.aclose()
                if runner.error is None:  # a loser, cut at the deadline, or a bug: it was sent
                    await _asettle_leg(stages, race.reservations.get(name))
                if runner.error is not None or runner.unexpected is not None:
                    continue
                if race.winner is None and race.unexpected is None and ctx.remaining() <= 0:
                    race.errors[name] = _timed_out(runner.route)
                    if stages.breakers is not None:
                        await stages.breakers.arecord(name, race.errors[name], seconds=0.0)
                    continue
                race.losers.append(runner.route)
                if stages.breakers is not None:
                    await stages.breakers.arelease(name)


async def _asecond_allowed(ctx: CallContext, stages: Stages, second: Provider) -> bool:
    assert stages.breakers is not None
    permit = await stages.breakers.apermit(second.name)
    if not permit.allowed:
        pipeline.route_refused(ctx, stages, second, permit)
    return permit.allowed
