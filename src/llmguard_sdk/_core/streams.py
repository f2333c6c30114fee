"""Guarded streams: iterate chunks as they arrive, get the assembled response at the end.

A stream walks the fallback chain like a plain call (the same plan, :mod:`.plan`), but only
until the first content reaches the caller: after that, a broken stream raises
:class:`~llmguard_sdk.errors.StreamInterruptedError` and is never replayed (the caller would
see the text twice), unless the Guard continues interrupted streams on the next route.

Round trips: a stream opens with the batch of a plain call (cache lookup, spend reserve, the
first route's permit and rate-limit reservation taken ahead) before its provider call; its
decisions that need no answer wait in the call's tail, sent in one batch after the last chunk
(or when the stream is closed): two round trips when all goes well, none between chunks.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator

import anyio

from .._closing import AsyncCloses, Closes
from .._nested_generators import close_thrown_again, owned_by_caller
from ..context import CallContext
from ..models import ChatResponse, StreamChunk
from . import opening, stages
from .drive import adrive, drive
from .opening import Ahead, OpeningOutcome, Tail
from .run import Run
from .stages import CACHE, DEGRADED, Stages

__all__ = ["AsyncChatStream", "ChatStream"]


class _StreamBase:
    """What both stream twins share: the opening, the end of the route loop, the tail."""

    def __init__(self, ctx: CallContext, stages: Stages) -> None:
        self._ctx = ctx
        self._guard_stages = stages
        self._stages = stages  # the spend hold's stages, once a budget holds the call
        self._response: ChatResponse | None = None
        self._ended = False
        self._close_requested = False
        self._reading = False  # a reader waits inside next(): a close waits for its chunk
        self._shutting = False  # closed (or being closed): a reader's next call ends its loop
        self._tail = Tail(ctx.deadline)  # decisions that need no answer: sent after the last chunk
        self._ahead: Ahead | None = None  # the first route's permit and reservation
        self._opening: OpeningOutcome | None = None
        self._dropped = False  # closed (or collected) before its end
        self._started = False  # read from: its generator's end reports the call from then on

    @property
    def response(self) -> ChatResponse:
        """The assembled response, once the stream has been read to its end."""
        if self._response is None:
            raise RuntimeError("the stream has not been read to its end yet")
        return self._response

    def _claim_close(self) -> bool:
        """Whether this close closes the stream now: not while a reader waits for its next
        chunk (noted: it takes effect when that chunk arrives), nor a second time."""
        if self._reading:
            self._close_requested = True
            return False
        if self._shutting:
            return False
        self._shutting = True
        return True

    def _ended_by(self, exc: BaseException) -> None:
        """Report the stream's end: its natural end, the failure that ended it, or (the
        reading task cancelled, an interrupt) its cancellation, as a plain call reports it."""
        if isinstance(exc, (StopIteration, StopAsyncIteration)):
            self._end()
        elif isinstance(exc, Exception):
            self._end(error=exc)
        else:
            self._end(cancelled=self._response is None)

    def _end(self, *, error: BaseException | None = None, cancelled: bool = False) -> None:
        if self._ended:
            return
        self._ended = True
        stages.report(
            self._ctx,
            self._stages,
            "stream",
            response=self._response,
            error=error,
            cancelled=cancelled,
        )

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
                self._stages = opening.held.stages
        return cached

    def _run(self) -> Run:
        opening = self._opening
        held, keys = (opening.held, opening.cache_keys) if opening is not None else (None, None)
        return Run(
            self._ctx, self._stages, streaming=True, tail=self._tail, ahead=self._ahead,
            held=held, keys=keys,
        )  # fmt: skip

    def _ended_with(self, response: ChatResponse | None) -> StreamChunk | None:
        """The route loop's answer (or the opening's cached one) becomes the stream's
        response; a whole answer that no stream delivered (cached, stale or degraded) is
        also the last chunk (see :meth:`_whole`)."""
        assert response is not None
        whole = self._whole(response)
        self._response = stages.finish(self._ctx, self._stages, response)
        return self._as_chunk(self._response) if whole else None

    async def _aended_with(self, response: ChatResponse | None) -> StreamChunk | None:
        """Async twin of :meth:`_ended_with` (an async output filter awaited on the loop)."""
        assert response is not None
        whole = self._whole(response)
        self._response = await stages.afinish(self._ctx, self._stages, response)
        return self._as_chunk(self._response) if whole else None

    def _whole(self, response: ChatResponse) -> bool:
        """Whether ``response`` is a whole answer not from a provider stream (degraded,
        cached), replayed as one chunk: its first token is delivered now (the response's
        timings count it)."""
        if response.route not in (CACHE, DEGRADED):
            return False
        if self._ctx.first_token_at is None:
            self._ctx.first_token_at = time.monotonic()
        return True

    @staticmethod
    def _as_chunk(response: ChatResponse) -> StreamChunk:
        """A whole answer, as the output filters left it, as one chunk."""
        return StreamChunk(
            text=response.text,
            finish_reason=response.finish_reason,
            usage=response.usage,
            route=response.route,
            id=response.id,  # (a hit's own: the seam's chunks carry it)
            metadata=response.metadata,
        )

    def _closing(self) -> None:
        """Queue what the stream's end still owes: the give-back of what was taken ahead
        and not used, and the spend settle (to the final response, else to what the
        attempts that went out used: the plan, closed first, noted them in the context)."""
        opening = self._opening
        if opening is None:
            return
        if self._ahead is not None:
            for step in self._ahead.leftovers(self._stages):
                self._tail.add(step)
        held, spend = opening.held, self._guard_stages.spend
        if held is not None and spend is not None and not held.done:
            self._tail.add(spend.settle_steps(held, self._ctx, self._response))


class _ChatStreamState(_StreamBase):
    """A :class:`ChatStream`'s state and its chunks' generator (which refers to the state,
    never to the stream: see :class:`_Stream`)."""

    def _guarded(self) -> Generator[StreamChunk, None, None]:
        """The stream between its two round trips: the opening batch (a cache hit is
        replayed as one chunk, a refusal raised), the routes' chunks as they come, then one
        batch with the tail: records, settles, the spend settle and the cache store (also
        when the stream ends early or fails)."""
        ctx, stages = self._ctx, self._guard_stages
        chunks: Generator[StreamChunk, None, None] | None = None
        try:
            cached = self._opened(opening.open_call(ctx, stages))
            if cached is not None:
                hit = self._ended_with(cached)  # (a whole answer: its one chunk)
                if hit is not None:
                    yield hit
                return
            run = self._run()
            chunks = drive(run)
            yield from chunks
            last = self._ended_with(run.response)
            if last is not None:
                yield last
            assert self._opening is not None  # the stream went to its routes
            self._opening.remember_later(ctx, stages, self.response)  # (as served)
        except GeneratorExit:  # closed, or dropped and collected: reported as cancelled
            self._dropped = True
            raise
        finally:
            if chunks is not None:
                chunks.close()
            self._closing()
            self._tail.flush(last=True)
            if self._dropped:
                self._end(cancelled=self._response is None)


class _Stream:
    """What both public stream twins share: their state, apart from the generator of their
    chunks. The generator refers to the state, and the stream to both; nothing refers back
    to the stream, so a stream its reader drops unclosed is freed at once, and its
    generator, closed then, gives back what the stream held (a concurrency slot, a spend
    hold, the connection) at once too, not when a garbage collection finds the cycle."""

    _state: _StreamBase

    @property
    def response(self) -> ChatResponse:
        """The assembled response, once the stream has been read to its end."""
        return self._state.response

    def __del__(self) -> None:
        """A stream dropped before it was read at all (its generator never ran, so its end
        reports nothing) is a cancelled call, as one closed unread is: its span and hooks."""
        state = getattr(self, "_state", None)
        if state is not None and not state._started:
            state._end(cancelled=True)


class ChatStream(_Stream, Closes):
    """An iterator of :class:`~llmguard_sdk.models.StreamChunk` from :meth:`Guard.chat`.

    Use it in a ``with`` block (or call :meth:`close`) so that a stream you stop reading
    early releases its connection. :attr:`response` holds the assembled answer, with usage and
    timings, after the last chunk.
    """

    _State: type[_ChatStreamState] = _ChatStreamState

    def __init__(self, ctx: CallContext, stages: Stages) -> None:
        self._state = state = self._State(ctx, stages)
        self._chunks = state._guarded()
        self._lock = threading.Lock()  # a reader and a closer in two threads

    def __iter__(self) -> Iterator[StreamChunk]:
        return self

    def __next__(self) -> StreamChunk:
        state = self._state
        with self._lock:
            if state._shutting:  # closed from another thread between two chunks
                raise StopIteration
            state._reading = state._started = True
        try:
            chunk = next(self._chunks)
        except BaseException as exc:
            state._ended_by(exc)
            raise
        finally:
            with self._lock:
                state._reading = False
        if state._close_requested:  # close() came from another thread while we waited
            self.close()
            raise StopIteration
        return chunk

    def close(self) -> None:
        """Stop the stream and release its connection.

        Called from another thread while a reader waits for the next chunk, it takes effect
        when that chunk arrives (or the deadline passes): the reader's loop then ends (as it
        does when the reader asks for its next chunk while the stream is being closed).
        """
        state = self._state
        with self._lock:
            if not state._claim_close():
                return
        self._chunks.close()
        state._end(cancelled=state._response is None)


class _AsyncStreamState(_StreamBase):
    """Async twin of :class:`_ChatStreamState`."""

    async def _guarded(self) -> AsyncGenerator[StreamChunk, None]:
        """Async twin of :meth:`ChatStream._guarded` (its end is shielded from
        cancellation)."""
        ctx, stages = self._ctx, self._guard_stages
        chunks: AsyncGenerator[StreamChunk, None] | None = None
        try:
            cached = self._opened(await opening.aopen_call(ctx, stages))
            if cached is not None:
                hit = await self._aended_with(cached)  # (a whole answer: its one chunk)
                if hit is not None:
                    yield hit
                return
            run = self._run()
            chunks = adrive(run)
            async for chunk in chunks:
                yield chunk
            last = await self._aended_with(run.response)
            if last is not None:
                yield last
            assert self._opening is not None  # the stream went to its routes
            await self._opening.aremember_later(ctx, stages, self.response)  # (as served)
        except GeneratorExit:  # closed, or dropped and collected: reported as cancelled
            self._dropped = True
            raise
        except BaseException:
            if not self._reading:  # thrown in between two chunks: the loop's close of a
                self._dropped = True  # dropped stream, cancelled before it began
                await close_thrown_again()
            raise
        finally:
            with anyio.CancelScope(shield=True):
                try:  # (the loop's shutdown may be closing them too: "already running")
                    if chunks is not None:
                        await chunks.aclose()
                finally:
                    self._closing()
                    await self._tail.aflush(last=True)
            if self._dropped:
                self._end(cancelled=self._response is None)


class AsyncChatStream(_Stream, AsyncCloses):
    """The async twin of :class:`ChatStream`, from :meth:`Guard.achat`.

    Iterate it with ``async for``; use ``async with`` (or ``await stream.aclose()``) to
    release the connection of a stream you stop reading early (one dropped unclosed is
    closed when its last reference goes, in the background of its event loop).
    """

    _State: type[_AsyncStreamState] = _AsyncStreamState

    def __init__(self, ctx: CallContext, stages: Stages) -> None:
        self._state = state = self._State(ctx, stages)
        self._chunks = state._guarded()

    def __aiter__(self) -> AsyncIterator[StreamChunk]:
        return self

    async def __anext__(self) -> StreamChunk:
        state = self._state
        if state._shutting:  # closed from another task between two chunks
            raise StopAsyncIteration
        state._reading = state._started = True
        try:
            chunk = await owned_by_caller(self._chunks.__anext__())
        except BaseException as exc:
            state._ended_by(exc)
            raise
        finally:
            state._reading = False
        if state._close_requested:  # aclose() came from another task while we waited
            await self.aclose()
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        """Stop the stream and release its connection.

        Called from another task while the reader waits for the next chunk, it takes effect
        when that chunk arrives (or the deadline passes): the reader's loop then ends. To stop
        at once, cancel the reading task instead.
        """
        state = self._state
        if not state._claim_close():
            return
        await self._chunks.aclose()
        state._end(cancelled=state._response is None)
