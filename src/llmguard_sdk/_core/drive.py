"""The two drivers of the plan: blocking I/O (:func:`drive`) and ``await`` (:func:`adrive`).

They decide nothing. Each takes the plan's ops (:mod:`.ops`) one by one, performs them and
sends the answer back (a provider's failure is thrown in); an :class:`~.ops.Emit` becomes a
chunk the driver yields to the stream's reader. A plan left mid-way (the reader closed the
stream, the task was cancelled, a bug) is closed, so its own handlers queue the give-backs;
the driver then closes the provider streams it opened.

A hedge race's legs run in threads (sync; a loser is aborted: its sockets are shut down, a local
model's generation abandoned, so it ends at once and gives its permit and lease back; a
provider that registers nothing with the abort is left to its deadline) or in tasks (async; a
loser is cancelled). Either driver waits for the losers it stopped to end where they end at
once (a thread the abort reached; a cancelled task), so an answer that came as a loser was
stopped is read and charged as it used (one left to its deadline is charged an estimate).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from ..budget._usage import usable_cost, usable_usage
from ..errors import ProviderError
from ..models import ChatResponse, StreamChunk
from ..providers._abort import Abort, abortable, sleep
from ..store import Batch, Step
from . import ops
from .assembly import has_content
from .plan import plan
from .run import Run

# How long a sync race's win waits for the losers it stopped to end, so that an answer one of
# them also had is charged as used: a leg the abort reaches ends at once (a socket shut down);
# one stuck where the abort does not reach (a local model's prompt pass) is not waited for
# (charged its estimate, its give-backs sent when it ends), so a hedged call never takes the
# slow leg's time.
_HALT_GRACE_S = 0.25

__all__ = ["acomplete", "adrive", "complete", "drive"]

logger = logging.getLogger("llmguard_sdk")


def _complete(op: ops.Complete) -> ChatResponse:
    return _bounded(op.route.complete(op.request, model=op.model, deadline=op.deadline))


async def _acomplete(op: ops.Complete) -> ChatResponse:
    return _bounded(await op.route.acomplete(op.request, model=op.model, deadline=op.deadline))


def _bounded(response: ChatResponse) -> ChatResponse:
    """A route's answer, its usage dropped (estimated, as a missing one) where a count is
    absurd, and its reported cost where it is no cost (a NaN, infinite, negative: see
    :mod:`~llmguard_sdk.budget._usage`): a provider object's own passed no parser (a usage
    the parser built, bounded as it was read, passes as it is)."""
    if not isinstance(response, ChatResponse):
        return response
    dropped: dict[str, Any] = {}
    if usable_usage(response.usage) is not response.usage:
        dropped["usage"] = None
    cost = response.cost_usd
    if cost is not None and response.cost_source == "reported" and usable_cost(cost) is None:
        dropped["cost_usd"] = dropped["cost_source"] = None
    return response.model_copy(update=dropped) if dropped else response


def _open(op: ops.Open) -> Generator[StreamChunk, None, None]:
    return op.route.stream(
        op.request, model=op.model, deadline=op.deadline, idle_timeout=op.idle_timeout
    )


def _aopen(op: ops.Open) -> AsyncGenerator[StreamChunk, None]:
    return op.route.astream(
        op.request, model=op.model, deadline=op.deadline, idle_timeout=op.idle_timeout
    )


# -- blocking ---------------------------------------------------------------------------------


def complete(run: Run) -> ChatResponse:
    """A plain call's response, the plan carried out with blocking I/O."""
    for _chunk in drive(run):
        raise AssertionError("a plain call emits no chunk")  # pragma: no cover
    assert run.response is not None
    return run.response


def drive(run: Run) -> Generator[StreamChunk, None, None]:
    """Carry out the plan with blocking I/O: the chunks it emits; its response in
    ``run.response``."""
    walk = _Walk(run)
    try:
        for op in walk:
            if isinstance(op, ops.Emit):
                yield op.chunk
            else:
                try:
                    walk.answer = _perform(op, run, walk.streams)
                except ProviderError as failure:
                    walk.error = failure
    finally:
        walk.end()


class _Walk:
    """The plan on its way: the next op, given the answer to the last one (or the provider's
    failure, thrown in)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.steps = plan(run)
        self.streams = _Streams()
        self.answer: Any = None
        self.error: ProviderError | None = None

    def __iter__(self) -> Generator[Any, None, None]:
        """The ops, each sent the answer (or thrown the failure) the driver left in
        ``answer`` / ``error``; the plan's response ends up in ``run.response``."""
        while True:
            answer, error = self.answer, self.error
            self.answer, self.error = None, None
            try:
                yield self.steps.throw(error) if error is not None else self.steps.send(answer)
            except StopIteration as finished:
                self.run.response = finished.value
                return

    def close(self) -> None:
        """A plan left mid-way (closed, cancelled, a bug) is closed: its handlers queue the
        give-backs; what the opening took ahead and the plan did not use goes back too."""
        self.steps.close()
        self.run.give_back_ahead()

    def end(self) -> None:
        """The blocking driver's end, however it ends: the plan closed, then the provider
        streams it opened."""
        self.close()
        self.streams.close_all()

    async def aend(self) -> None:
        """The async driver's end (the streams' closing shielded from cancellation; a
        plain call, which opened none, enters no cancel scope)."""
        self.close()
        if self.streams.open:
            with anyio.CancelScope(shield=True):
                await self.streams.aclose_all()


def _perform(op: Any, run: Run, streams: _Streams) -> Any:
    if isinstance(op, ops.Ask):
        return run.tail.ask(op.step)
    if isinstance(op, ops.Next):
        return streams.next(op.chunks)
    if isinstance(op, ops.Complete):
        return _complete(op)
    if isinstance(op, ops.Open):
        return streams.add(_open(op))
    if isinstance(op, ops.Sleep):
        run.tail.flush()
        if op.seconds > 0:
            sleep(op.seconds)  # (cut short when the call is aborted)
        return None
    if isinstance(op, ops.Race):
        run.tail.flush()
        return _race(op, run, streams)
    if isinstance(op, ops.Blocking):
        return op.work()
    raise TypeError(f"unknown op {op!r}")


class _Streams:
    """The provider streams a driver opened and has not closed yet."""

    def __init__(self) -> None:
        self.open: list[Any] = []

    def add(self, chunks: Any) -> Any:
        self.open.append(chunks)
        return chunks

    def _forget(self, chunks: Any) -> None:
        self.open = [c for c in self.open if c is not chunks]

    def next(self, chunks: Generator[StreamChunk, None, None]) -> StreamChunk | None:
        try:
            return next(chunks)
        except BaseException as ended:
            self._forget(chunks)
            if isinstance(ended, StopIteration):
                return None
            chunks.close()  # ended already, unless interrupted from outside
            raise

    def close_all(self) -> None:
        for chunks in self.open:
            chunks.close()
        self.open = []

    async def anext(self, chunks: Any) -> StreamChunk | None:
        try:
            chunk: StreamChunk = await chunks.__anext__()
        except BaseException as ended:
            self._forget(chunks)
            if isinstance(ended, StopAsyncIteration):
                return None
            if not isinstance(ended, Exception):
                with anyio.CancelScope(shield=True):
                    await chunks.aclose()
            raise
        return chunk

    async def aclose_all(self) -> None:
        for chunks in self.open:
            await chunks.aclose()
        self.open = []


def _race(op: ops.Race, run: Run, streams: _Streams) -> Any:
    """Carry out a hedge race with each leg in a thread."""
    steps, legs = op.steps, _ThreadLegs()
    answer: Any = None
    try:
        while True:
            try:
                race_op = steps.send(answer)
            except StopIteration as finished:
                outcome = finished.value
                break
            answer = None
            if isinstance(race_op, ops.Ask):
                answer = run.tail.ask(race_op.step)
            elif isinstance(race_op, ops.StartLeg):
                legs.start(race_op)
            elif isinstance(race_op, ops.AwaitLeg):
                answer = legs.wait(race_op.timeout)
            elif isinstance(race_op, ops.HaltLegs):
                answer = legs.halt(race_op.keep, run)
            elif isinstance(race_op, ops.StopLegs):
                legs.give_back(race_op, run)
    except BaseException:
        steps.close()  # the race plan gives back what its legs hold
        legs.stop_all(run)
        raise
    if isinstance(outcome, ops.Preopened):
        streams.add(outcome.chunks)
    return outcome


@dataclass
class _Leg:
    op: ops.StartLeg
    chunks: Any = None
    finished: bool = False
    stopped: bool = False
    after: list[Step[Any]] | None = None  # (None: the race has not said yet)
    abort: Abort = field(default_factory=Abort)
    thread: threading.Thread | None = None
    buffered: list[StreamChunk] = field(default_factory=list)  # (a stream's, so far)


class _ThreadLegs:
    """ops.Race legs in threads; a lock decides who ends a loser's stream: its own thread (still
    reading) or the race (it had finished)."""

    def __init__(self) -> None:
        self.events: queue.SimpleQueue[ops.LegEvent] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.legs: dict[str, _Leg] = {}

    def start(self, op: ops.StartLeg) -> None:
        leg = self.legs[op.route.name] = _Leg(op)
        if isinstance(op.attempt, ops.Open):
            leg.chunks = _open(op.attempt)
        leg.thread = threading.Thread(target=self._run, args=(leg,), daemon=True)
        leg.thread.start()

    def _run(self, leg: _Leg) -> None:
        name = leg.op.route.name
        event: ops.LegEvent
        try:
            with abortable(leg.abort):
                event = self._attempt(leg)
        except BaseException as error:
            event = _failed_leg(name, error, leg.buffered)
        with self.lock:
            leg.finished = True
            after = leg.after if leg.stopped else None
        if after is None:  # (stopped, not given back yet: the race reads it, gives back)
            self.events.put(event)
            return
        if leg.chunks is not None:  # lost the race while reading: this thread ends it
            leg.chunks.close()
        _send_now(after)

    @staticmethod
    def _attempt(leg: _Leg) -> ops.LegEvent:
        attempt, name = leg.op.attempt, leg.op.route.name
        if isinstance(attempt, ops.Complete):
            return ops.LegEvent(name, value=_complete(attempt))
        for chunk in leg.chunks:
            leg.buffered.append(chunk)
            if has_content(chunk) or leg.stopped:
                break
        return ops.LegEvent(name, value=(leg.buffered, leg.chunks))

    def wait(self, timeout: float) -> ops.LegEvent | None:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def halt(self, keep: str | None, run: Run) -> list[ops.LegEvent]:
        """Stop every leg but ``keep``; wait for those the abort reached (they end at once:
        a socket shut down, a generation abandoned), for :data:`_HALT_GRACE_S` at most
        within the call's deadline; the events of the legs that ended by then (one that
        registered nothing, or did not end in time, goes on: its deadline its end)."""
        with self.lock:
            running = [leg for name, leg in self.legs.items() if name != keep and not leg.stopped]
            for leg in running:
                leg.stopped = True
        for leg in running:
            if not leg.finished and leg.abort.abort() and leg.thread is not None:
                leg.thread.join(max(0.0, min(_HALT_GRACE_S, run.ctx.remaining())))
        events: list[ops.LegEvent] = []
        while True:
            try:
                events.append(self.events.get_nowait())
            except queue.Empty:
                return _with_streamed(events, {leg.op.route.name: leg for leg in running})

    def give_back(self, op: ops.StopLegs, run: Run) -> None:
        """Send each stopped leg's give-backs (``op.after``) once it has ended: now, or from
        its thread when it ends."""
        ended: list[_Leg] = []
        with self.lock:
            for name, leg in self.legs.items():
                if name == op.keep or not leg.stopped or leg.after is not None:
                    continue
                leg.after = op.after.get(name, [])
                if leg.finished:
                    ended.append(leg)
                    run.queue(leg.after)
        for leg in ended:
            if leg.chunks is not None:
                leg.chunks.close()

    def stop_all(self, run: Run) -> None:
        """The race left mid-way: every leg stopped, its give-backs the race plan's."""
        with self.lock:
            for leg in self.legs.values():
                leg.stopped = True
        for leg in self.legs.values():
            leg.abort.abort()
        self.give_back(ops.StopLegs(None), run)


def _with_streamed(events: list[ops.LegEvent], stopped: dict[str, Any]) -> list[ops.LegEvent]:
    """``events``, and for each ``stopped`` stream leg that ended without one of its chunks
    (failed as it was stopped; a cancelled task) the chunks it had read: what it used so far."""
    read = {event.route for event in events if event.value is not None}
    streamed = [
        ops.LegEvent(name, value=(list(leg.buffered), leg.chunks))
        for name, leg in stopped.items()
        if name not in read and leg.buffered
    ]
    return events + streamed


def _send_now(steps: list[Step[Any]]) -> None:
    """Send an abandoned leg's give-backs from its own thread (the call has moved on)."""
    if not steps:
        return
    try:
        for outcome in Batch(steps).run():
            if outcome.error is not None:
                raise outcome.error
    except Exception:
        logger.exception("giving back a hedge loser's permit or lease failed")


def _failed_leg(name: str, error: BaseException, shown: list[StreamChunk]) -> ops.LegEvent:
    """A hedge leg's failure: a provider's is the leg's (``shown``: the chunks its stream
    had read); anything else (a bug, an interrupt) is raised to the caller."""
    if isinstance(error, ProviderError):
        return ops.LegEvent(name, error=error, shown=list(shown))
    return ops.LegEvent(name, unexpected=error)


# -- async ------------------------------------------------------------------------------------


async def acomplete(run: Run) -> ChatResponse:
    """A plain call's response, the plan carried out with ``await``."""
    async for _chunk in adrive(run):
        raise AssertionError("a plain call emits no chunk")  # pragma: no cover
    assert run.response is not None
    return run.response


async def adrive(run: Run) -> AsyncGenerator[StreamChunk, None]:
    """Async twin of :func:`drive`."""
    walk = _Walk(run)
    try:
        for op in walk:
            if isinstance(op, ops.Emit):
                yield op.chunk
            else:
                try:
                    walk.answer = await _aperform(op, run, walk.streams)
                except ProviderError as failure:
                    walk.error = failure
    finally:
        await walk.aend()


async def _aperform(op: Any, run: Run, streams: _Streams) -> Any:
    if isinstance(op, ops.Ask):
        return await run.tail.aask(op.step)
    if isinstance(op, ops.Next):
        return await streams.anext(op.chunks)
    if isinstance(op, ops.Complete):
        return await _acomplete(op)
    if isinstance(op, ops.Open):
        return streams.add(_aopen(op))
    if isinstance(op, ops.Sleep):
        await run.tail.aflush()
        if op.seconds > 0:
            await anyio.sleep(op.seconds)
        return None
    if isinstance(op, ops.Race):
        await run.tail.aflush()
        return await _arace(op, run, streams)
    if isinstance(op, ops.Blocking):
        return await anyio.to_thread.run_sync(op.work)
    raise TypeError(f"unknown op {op!r}")


async def _arace(op: ops.Race, run: Run, streams: _Streams) -> Any:
    """Carry out a hedge race with each leg in a task of one task group. An error of the
    race itself is raised after the group has ended (as it is, not in an exception group)."""
    steps = op.steps
    outcome: Any = None
    failure: Exception | None = None
    legs = _TaskLegs()
    try:
        async with anyio.create_task_group() as tasks:
            legs.tasks = tasks
            answer: Any = None
            while True:
                try:
                    race_op = steps.send(answer)
                    answer = None
                    if isinstance(race_op, ops.Ask):
                        answer = await run.tail.aask(race_op.step)
                    elif isinstance(race_op, ops.StartLeg):
                        legs.start(race_op)
                    elif isinstance(race_op, ops.AwaitLeg):
                        answer = await legs.wait(race_op.timeout)
                    elif isinstance(race_op, ops.HaltLegs):
                        answer = await legs.halt(race_op.keep)
                    elif isinstance(race_op, ops.StopLegs):
                        legs.give_back(race_op, run)
                except StopIteration as finished:
                    outcome = finished.value
                    break
                except Exception as error:
                    failure = error
                    break
            tasks.cancel_scope.cancel()  # every leg but a kept winner has ended; make sure
    except BaseException:
        steps.close()  # cancelled: the race plan gives back what its legs hold
        if isinstance(outcome, ops.Preopened):  # cancelled as the race ended: its winner too
            run.queue(run.give_back_steps(outcome.route, outcome.reservation))
            outcome = None  # (its stream is closed below)
        raise
    finally:
        keep = outcome.chunks if isinstance(outcome, ops.Preopened) else None
        with anyio.CancelScope(shield=True):
            await legs.aclose_streams(keep)
    if failure is not None:
        steps.close()
        raise failure
    if keep is not None:
        streams.add(keep)
    return outcome


@dataclass
class _TaskLeg:
    op: ops.StartLeg
    scope: anyio.CancelScope
    chunks: Any = None
    ended: anyio.Event = field(default_factory=anyio.Event)
    buffered: list[StreamChunk] = field(default_factory=list)  # (a stream's, so far)


class _TaskLegs:
    """ops.Race legs in tasks; a loser's task is cancelled."""

    def __init__(self) -> None:
        self.tasks: anyio.abc.TaskGroup | None = None
        self.legs: dict[str, _TaskLeg] = {}
        self.events: deque[ops.LegEvent] = deque()
        self.arrived = anyio.Event()

    def start(self, op: ops.StartLeg) -> None:
        assert self.tasks is not None
        leg = self.legs[op.route.name] = _TaskLeg(op, anyio.CancelScope())
        if isinstance(op.attempt, ops.Open):
            leg.chunks = _aopen(op.attempt)
        self.tasks.start_soon(self._run, leg)

    async def _run(self, leg: _TaskLeg) -> None:
        attempt, name = leg.op.attempt, leg.op.route.name
        event: ops.LegEvent
        with leg.scope:
            try:
                if isinstance(attempt, ops.Complete):
                    event = ops.LegEvent(name, value=await _acomplete(attempt))
                else:
                    async for chunk in leg.chunks:
                        leg.buffered.append(chunk)
                        if has_content(chunk):
                            break
                    event = ops.LegEvent(name, value=(leg.buffered, leg.chunks))
            except Exception as error:  # cancellation is the task group's, not the leg's
                event = _failed_leg(name, error, leg.buffered)
            finally:
                leg.ended.set()
            self.events.append(event)
            self.arrived.set()

    async def wait(self, timeout: float) -> ops.LegEvent | None:
        """The next leg's event, waited for up to ``timeout`` seconds. A wait of none does
        not await: no checkpoint where a cancellation could land between a race's win and
        its end (which hands the winner on; the race's plan takes what arrived meanwhile)."""
        if timeout <= 0:
            return self.events.popleft() if self.events else None
        if not self.events:
            self.arrived = anyio.Event()
            with anyio.move_on_after(timeout):
                await self.arrived.wait()
        return self.events.popleft() if self.events else None

    async def halt(self, keep: str | None) -> list[ops.LegEvent]:
        """Cancel every leg but ``keep`` and wait for their tasks to end (at once, unless
        one waits on what a cancellation does not stop: the task group waits for it
        anyway, so no grace as in the sync driver); the events of the legs that ended by
        then."""
        stopped = [leg for name, leg in self.legs.items() if name != keep]
        for leg in stopped:
            leg.scope.cancel()
        for leg in stopped:
            await leg.ended.wait()
        events, self.events = list(self.events), deque()
        return _with_streamed(events, {leg.op.route.name: leg for leg in stopped})

    def give_back(self, op: ops.StopLegs, run: Run) -> None:
        for name in self.legs:
            if name != op.keep:
                run.queue(op.after.get(name, []))

    async def aclose_streams(self, keep: Any) -> None:
        for leg in self.legs.values():
            if leg.chunks is not None and leg.chunks is not keep:
                await leg.chunks.aclose()
