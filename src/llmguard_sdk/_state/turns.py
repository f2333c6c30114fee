"""The async round trips of a store on one event loop: their turns at its connections, and
how long each waits for Redis, both judged on the loop's on-time clock (:mod:`._state.lag`).

A burst of calls on one event loop (2,000 ``achat`` at once) made the loop run late by its
own CPU work, and redis-py's waits (for a free pooled connection, a connection, an answer)
ran out on the wall clock: the burst measured its own lag, its calls were decided without
Redis (a fail-closed budget refused every one). Here:

* A round trip first takes one of ``max_connections`` turns of its event loop (FIFO), so it
  never waits in redis-py's pool. A turn wait runs out (:func:`.connections.pool_exhausted`'s
  error, this process's load) only when no turn came free for ``pool_timeout`` on the
  on-time clock while none of the round trips holding them waits for Redis (they are stuck
  elsewhere: one waiting for Redis ends within its bound), or after ten times
  ``pool_timeout`` in all: a queue that moves is waited out. A turn that comes while the
  store is paused (an outage began meanwhile) is given on at once: its round trip fails as
  Redis down, unsent.
* A store's connections (:mod:`._state.connections`) bound each wait for Redis on the
  on-time clock, and at most ten times that in all: a standalone store's from the moment
  they are asked for (:func:`arm`), a cluster node's each send and each answer on its own
  (:class:`Waiting`, around redis-py's public ``send_packed_command`` and ``read_response``);
  an answer ``socket_timeout``, a fresh connection ``socket_connect_timeout`` more.
  redis-py's own socket timeouts are raised to that cap meanwhile (a connection used
  outside a turn, through ``aclient``, keeps them), so a bound here runs out first: while
  the loop ran on time, as :func:`.lag.unanswered`'s error (Redis did not answer: an
  outage, after the same seconds as before); past the cap, as :func:`.lag.loop_busy`'s
  error (the load's). The wait is cut short by cancelling its task (the cancellation is
  taken back when it arrives, as ``asyncio.timeout`` does): a standalone store's round
  trip as a whole; a cluster node's send or answer, whose error redis-py then meets as it
  meets its own timeout (the node's connection released, the next startup node asked for
  the slot map ...).

A round trip whose call's deadline leaves it less than such a bound (:mod:`._state.bounds`)
is also cut short when that time is up, on the monotonic clock, as
:func:`.bounds.out_of_time`'s error (the call's lack of time: not an outage).

A tick of :class:`.lag.LoopLag` (every 10 ms while round trips are under way) checks the
bounds; nothing is scheduled per round trip.

Private. redis is imported when a bound runs out, never before.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import time
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING

from . import bounds
from .lag import LoopLag, lags, loop_busy, unanswered

if TYPE_CHECKING:
    from .health import RedisHealth

__all__ = ["CAP", "RoundTrip", "Turns", "Waiting", "arm", "pause"]

CAP = 10.0  # a bound on the on-time clock runs out after this many times it in all
# why a round trip was cut short: Redis silent, the loop late, the call's time up (bounds.py)
_SILENT, _LATE, _OUT_OF_TIME = 1, 2, 3

_TRIP: contextvars.ContextVar[_Trip | None] = contextvars.ContextVar(
    "llmguard_round_trip", default=None
)


_Armed = deque[tuple[float, float, int, "_Trip"]]


class _Trip:
    """One round trip holding a turn, bounded once :func:`arm` is called in it; or one wait
    of a cluster node's connection in such a round trip (:class:`Waiting`)."""

    __slots__ = ("arms", "cancelling", "cut", "done", "left", "seconds", "task", "turns")

    def __init__(self, turns: Turns, task: asyncio.Task[object] | None) -> None:
        self.turns = turns
        self.task = task
        cancelling = getattr(task, "cancelling", None)  # (Python 3.11 on)
        self.cancelling: int = cancelling() if cancelling is not None else 0
        self.cut = 0  # why it was cut short (0: not)
        self.done = False
        self.seconds = 0.0  # the bound armed last
        self.arms = 0  # bounds armed so far (an entry of an earlier one is stale)
        self.left = 0.0  # the seconds its call's deadline left it when armed (bounds.py)


def arm(fresh: bool) -> bool:
    """The round trip under way now waits for Redis: an answer, or a ``fresh`` connection
    and then an answer (called by a standalone store's connections); whether one of a turn
    is under way (else nothing is bounded here: ``aclient`` used directly)."""
    trip = _TRIP.get()
    if trip is None or trip.done:
        return False
    trip.turns.arm(trip, fresh)
    return True


def pause() -> None:
    """The round trip under way no longer waits on its bound (a connection's health check
    waits on its own ``socket_timeout``, see :mod:`._state.connections`) until it is armed
    again."""
    trip = _TRIP.get()
    if trip is not None and trip.arms:
        trip.arms += 1  # (its armed entries are stale now)


class Turns:
    """The turns of one store's async round trips on one event loop (see the module's docs):
    ``slots`` at once; a turn waited for ``wait`` seconds (``pool_timeout``) without one
    coming free runs out; a connection bounded by ``connect`` seconds, an answer by
    ``answer``."""

    def __init__(
        self, slots: int, wait: float, connect: float, answer: float, health: RedisHealth
    ) -> None:
        self.slots, self.wait, self.connect, self.answer = slots, wait, connect, answer
        self._health = health
        self._free = slots
        self._lag: LoopLag = lags.get()
        self._loop = asyncio.get_running_loop()
        self._waiting: deque[tuple[asyncio.Future[None], float]] = deque()  # (turn, since)
        # the bounds armed, an answer's and a fresh connection's (each in deadline order):
        # (on-time deadline, wall-clock cap, the arm's number, trip)
        self._armed: tuple[_Armed, _Armed] = (deque(), deque())
        # the bounds of round trips whose call's deadline leaves them less (bounds.py), on
        # the monotonic clock, soonest first: (instant, the arm's number, its order, trip)
        self._due: list[tuple[float, int, int, _Trip]] = []
        self._armings = 0  # (the order of the bounds in _due: no two compare their trips)
        self._moved = 0.0  # on the on-time clock: a turn last came free to a waiter
        self._busy = 0  # turns taken, and waits for one
        self._in_redis = 0  # turns whose round trip waits for Redis (bounded: armed)

    def __call__(self) -> RoundTrip:
        """Around one round trip: takes a turn (waiting FIFO), gives it back after."""
        return RoundTrip(self)

    # -- the turns -----------------------------------------------------------------------

    async def take(self) -> _Trip:
        self._busy += 1
        if self._busy == 1:
            self._lag.check_on_ticks(self, True)
        self._lag.start()
        try:
            if self._free and not self._waiting:
                self._free -= 1
            else:
                await self._wait()
                self._check_paused()
        except BaseException:
            self._left()
            raise
        task = asyncio.current_task()
        return _Trip(self, task)

    async def _wait(self) -> None:
        if not self._waiting:
            self._moved = self._lag.ontime()
        turn: asyncio.Future[None] = self._loop.create_future()
        self._waiting.append((turn, self._loop.time()))
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled() and turn.exception() is None:
                self._give()  # handed a turn as it was cancelled: the next waiter's
            raise

    def _check_paused(self) -> None:
        health = self._health
        if health.failures and time.monotonic() < health.down_until:
            from redis.exceptions import ConnectionError

            self._give()
            raise ConnectionError(
                "not sent: Redis is paused (an outage began while this round trip waited "
                "for its turn at the store's connections)"
            )

    def give(self, trip: _Trip) -> None:
        self.disarm(trip)
        self._give()
        self._left()

    def _give(self) -> None:
        waiting = self._waiting
        while waiting:
            turn, _ = waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                self._moved = self._lag.ontime()
                return
        self._free += 1

    def _left(self) -> None:
        self._lag.stop()
        self._busy -= 1
        if not self._busy:  # (no tick checks it now: what it still keeps is stale)
            self._lag.check_on_ticks(self, False)
            for armed in self._armed:
                armed.clear()
            self._due.clear()
            self._waiting.clear()

    # -- the bounds ----------------------------------------------------------------------

    def arm(self, trip: _Trip, fresh: bool) -> None:
        seconds = self.connect + self.answer if fresh else self.answer
        trip.seconds = seconds
        if not trip.arms:
            self._in_redis += 1
        trip.arms += 1
        self._armed[fresh].append(
            (self._lag.ontime() + seconds, self._loop.time() + CAP * seconds, trip.arms, trip)
        )
        left = bounds.left()  # (the call's deadline leaves the round trip less time)
        if left is not None and left < seconds:
            trip.left = left
            self._armings += 1
            heapq.heappush(self._due, (time.monotonic() + left, trip.arms, self._armings, trip))

    def disarm(self, trip: _Trip) -> None:
        """``trip`` (a round trip, or a wait of one) waits for Redis no more."""
        trip.done = True
        if trip.arms:
            self._in_redis -= 1

    def check(self, now: float, ontime: float) -> None:
        """Cut short the round trips and turn waits past their bounds (see the module)."""
        for armed in self._armed:
            while armed:
                by, cap, arms, trip = armed[0]
                if trip.done or trip.cut or trip.arms != arms:
                    armed.popleft()  # (over, or armed again since)
                elif ontime >= by or now >= cap:
                    armed.popleft()
                    trip.cut = _SILENT if ontime >= by else _LATE
                    if trip.task is not None:
                        trip.task.cancel()
                else:
                    break
        due, instant = self._due, time.monotonic()
        while due and due[0][0] <= instant:
            _, arms, _, trip = heapq.heappop(due)
            if not (trip.done or trip.cut or trip.arms != arms):
                trip.cut = _OUT_OF_TIME
                if trip.task is not None:
                    trip.task.cancel()
        waiting = self._waiting
        if waiting and not self._in_redis and ontime - self._moved >= self.wait:
            self._run_out(len(waiting), stuck=True)
        while waiting and now - waiting[0][1] >= CAP * self.wait:
            self._run_out(1, stuck=False)

    def _run_out(self, count: int, *, stuck: bool) -> None:
        from .connections import pool_exhausted

        for _ in range(count):
            turn, _ = self._waiting.popleft()
            if turn.done():
                continue
            if stuck:
                why = f"none came free in pool_timeout ({self.wait:g} s)"
            else:
                why = f"none came its way in {CAP * self.wait:g} s (ten times pool_timeout)"
            turn.set_exception(
                pool_exhausted()(
                    f"no connection of the pool came free in time: all {self.slots} "
                    f"(max_connections) in use, {why}"
                )
            )


class RoundTrip:
    """``async with turns():`` around one round trip (see :class:`Turns`)."""

    __slots__ = ("_token", "_trip", "_turns")

    def __init__(self, turns: Turns) -> None:
        self._turns = turns

    async def __aenter__(self) -> None:
        self._trip = trip = await self._turns.take()
        self._token = _TRIP.set(trip)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        trip = self._trip
        _TRIP.reset(self._token)
        self._turns.give(trip)
        error = _cut_short(trip, exc)
        if error is not None:
            raise error from exc


class Waiting:
    """``with Waiting(fresh) as bounded:`` around one wait of a cluster node's connection
    for Redis: a send (connecting first when ``fresh``), or an answer. Inside a round trip
    that holds a turn, the wait is bounded on the on-time clock (``bounded`` true; see the
    module's docs) and, cut short, raises :func:`.lag.unanswered`'s or
    :func:`.lag.loop_busy`'s error (a redis-py ``TimeoutError``) in place of the
    cancellation; outside one, nothing is bounded here."""

    __slots__ = ("_fresh", "_wait")

    def __init__(self, fresh: bool) -> None:
        self._fresh = fresh
        self._wait: _Trip | None = None

    def __enter__(self) -> bool:
        trip = _TRIP.get()
        if trip is None or trip.done:
            return False
        self._wait = wait = _Trip(trip.turns, asyncio.current_task())
        trip.turns.arm(wait, self._fresh)
        return True

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        wait = self._wait
        if wait is None:
            return
        wait.turns.disarm(wait)
        error = _cut_short(wait, exc)
        if error is not None:
            raise error from exc


def _cut_short(trip: _Trip, exc: BaseException | None) -> Exception | None:
    """The error in place of ``exc``, the cancellation that cut ``trip`` short (taken back);
    None when it was not cut short, or ``exc`` is no such cancellation."""
    if not trip.cut:
        return None
    uncancel = getattr(trip.task, "uncancel", None)  # (Python 3.11 on)
    if uncancel is not None and uncancel() > trip.cancelling:
        return None  # cancelled from outside too: that cancellation goes on
    if exc is None or not isinstance(exc, asyncio.CancelledError):
        return None  # (done before the cancellation arrived)
    seconds = trip.seconds
    if trip.cut == _OUT_OF_TIME:
        return bounds.ran_out(max(trip.left, 0.001))  # (it was sent)
    if trip.cut == _SILENT:
        return unanswered()(
            f"Redis did not answer in {seconds:g} s (the store's socket timeouts) while "
            "this process's event loop ran on time"
        )
    return loop_busy()(
        f"Redis did not answer in {CAP * seconds:g} s, during which this process's event "
        f"loop ran on time for less than {seconds:g} s (its own load: Redis may have "
        "answered in time)"
    )
