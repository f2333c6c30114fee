"""How late an event loop ran during an async Redis round trip, so that a timeout it caused
is not taken for Redis down.

A burst of calls on one event loop (their own CPU work: building requests, parsing answers)
can keep the loop from polling its sockets for longer than a Redis timeout: a connection
that Redis accepted at once, or an answer already in the socket, is seen only after the
timeout fired. While round trips are under way, :class:`LoopLag` ticks every 10 ms and adds
up how late each tick ran (nothing while none is under way). A round trip's Redis timeout
(a connection, a read, a write) during which the loop ran late for at least half the time
the round trip took is :func:`loop_busy`'s error (:func:`judged`): this process's own
load, decided without Redis like a full pool, not an outage. A timeout on a loop that ran
on time is judged as before (a hung or unreachable Redis is an outage).

The loop's *on-time clock* (:meth:`LoopLag.ontime`) is its clock less that lag: it stands
still while the loop runs late. A store's async round trips (a single Redis's or a
cluster's) wait for Redis on it (:mod:`._state.turns`), so a burst's own lag no longer runs
them out at all; a timeout that does come on a loop that ran late (past ten times the
bound) is :func:`loop_busy`'s error.

Private. redis is imported at the first judgement, never before.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Protocol

from .._loops import PerLoop
from .bounds import out_of_time
from .health import caused_by

__all__ = ["LoopLag", "Watched", "judged", "lags", "loop_busy", "unanswered"]

_TICK = 0.01  # seconds between ticks while round trips are under way
_MOSTLY = 0.5  # the share of a round trip the loop ran late for that makes it the load's


class Watched(Protocol):
    """What a tick checks (:meth:`LoopLag.check_on_ticks`): waits bounded on the on-time
    clock."""

    def check(self, now: float, ontime: float) -> None:
        """Cut short the waits past their bound: ``now`` on the loop's clock, ``ontime`` on
        its on-time clock."""


class LoopLag:
    """The lag of the running event loop (see the module's docs); one per loop
    (:data:`lags`), used from that loop's thread only."""

    def __init__(self) -> None:
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # (another async library: nothing measured)
            self._loop = None
        self._late = 0.0  # seconds the ticks ran late, in all
        self._due: float | None = None  # when the next tick is due (None: not ticking)
        self._watching = 0  # round trips under way
        self._checked: set[Watched] = set()  # what each tick checks (while it has waits)

    def _tick(self) -> None:
        loop, due = self._loop, self._due
        if loop is None or due is None:  # (never: a tick is scheduled with both)
            return
        now = loop.time()
        self._late += max(0.0, now - due)
        self._due = None
        if self._checked:
            ontime = now - self._late
            for watched in tuple(self._checked):
                watched.check(now, ontime)
        if self._watching:
            self._due = now + _TICK
            loop.call_at(self._due, self._tick)

    def late(self) -> float:
        """Seconds the loop ran late so far, the tick overdue now included."""
        if self._loop is None or self._due is None:
            return self._late
        return self._late + max(0.0, self._loop.time() - self._due)

    def ontime(self) -> float:
        """The loop's on-time clock: its clock less the seconds it ran late (see the
        module's docs)."""
        if self._loop is None:
            return 0.0
        return self._loop.time() - self.late()

    def start(self) -> None:
        """A round trip begins: tick (every 10 ms) until :meth:`stop` ends the last one."""
        self._watching += 1
        if self._loop is not None and self._due is None:
            self._due = self._loop.time() + _TICK
            self._loop.call_at(self._due, self._tick)

    def stop(self) -> None:
        """A round trip that :meth:`start` began has ended."""
        self._watching -= 1

    def check_on_ticks(self, watched: Watched, checked: bool) -> None:
        """Have each tick check ``watched`` (or, ``checked`` false, no longer)."""
        if checked:
            self._checked.add(watched)
        else:
            self._checked.discard(watched)

    @contextlib.contextmanager
    def watching(self) -> Iterator[Callable[[], float]]:
        """Around a round trip: yields a function that says how late the loop ran since the
        round trip began."""
        self.start()
        began = self.late()
        try:
            yield lambda: self.late() - began
        finally:
            self.stop()


lags: PerLoop[LoopLag] = PerLoop(LoopLag)


@functools.cache
def loop_busy() -> type[Exception]:
    """The error of a Redis round trip that timed out while the event loop ran late for most
    of it (a redis-py ``TimeoutError``): this process's load, not Redis down."""
    from redis.exceptions import TimeoutError

    class LoopBusyError(TimeoutError):
        """A Redis timeout that the event loop's own lag caused (see :func:`judged`)."""

    return LoopBusyError


@functools.cache
def unanswered() -> type[Exception]:
    """The error of a Redis round trip that the store's own bound cut short while the event
    loop ran on time (a redis-py ``TimeoutError``): Redis did not answer, an outage as
    before; never :func:`loop_busy`'s."""
    from redis.exceptions import TimeoutError

    class NoAnswerError(TimeoutError):
        """Redis did not answer in time while this event loop ran on time."""

    return NoAnswerError


def _timed_out(exc: BaseException) -> bool:
    from redis.exceptions import TimeoutError

    return caused_by(exc, TimeoutError)


def judged(exc: Exception, took: float, late: float) -> Exception:
    """``exc``, the error of a round trip that took ``took`` seconds while the loop ran
    ``late`` seconds late; or, when ``exc`` is a Redis timeout and ``late`` at least half of
    ``took``, :func:`loop_busy`'s error from it (see the module's docs)."""
    if late < _MOSTLY * took or not _timed_out(exc):
        return exc
    if caused_by(exc, unanswered()) or caused_by(exc, loop_busy()) or caused_by(exc, out_of_time()):
        return exc  # (judged already, on the on-time clock; or its call's time was up)
    busy = loop_busy()(
        f"{exc} after {took:.2f} s, of which this process's event loop ran {late:.2f} s late "
        "(its own load: Redis may have answered in time)"
    )
    busy.__cause__ = exc
    return busy
