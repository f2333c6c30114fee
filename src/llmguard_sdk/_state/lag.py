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

Private. redis is imported at the first judgement, never before.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator

from .._loops import PerLoop
from .health import caused_by

__all__ = ["LoopLag", "judged", "lags", "loop_busy"]

_TICK = 0.01  # seconds between ticks while round trips are under way
_MOSTLY = 0.5  # the share of a round trip the loop ran late for that makes it the load's


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

    def _tick(self) -> None:
        loop, due = self._loop, self._due
        if loop is None or due is None:  # (never: a tick is scheduled with both)
            return
        now = loop.time()
        self._late += max(0.0, now - due)
        self._due = None
        if self._watching:
            self._due = now + _TICK
            loop.call_at(self._due, self._tick)

    def late(self) -> float:
        """Seconds the loop ran late so far, the tick overdue now included."""
        if self._loop is None or self._due is None:
            return self._late
        return self._late + max(0.0, self._loop.time() - self._due)

    @contextlib.contextmanager
    def watching(self) -> Iterator[Callable[[], float]]:
        """Around a round trip: yields a function that says how late the loop ran since the
        round trip began."""
        self._watching += 1
        if self._loop is not None and self._due is None:
            self._due = self._loop.time() + _TICK
            self._loop.call_at(self._due, self._tick)
        began = self.late()
        try:
            yield lambda: self.late() - began
        finally:
            self._watching -= 1


lags: PerLoop[LoopLag] = PerLoop(LoopLag)


@functools.cache
def loop_busy() -> type[Exception]:
    """The error of a Redis round trip that timed out while the event loop ran late for most
    of it (a redis-py ``TimeoutError``): this process's load, not Redis down."""
    from redis.exceptions import TimeoutError

    class LoopBusyError(TimeoutError):
        """A Redis timeout that the event loop's own lag caused (see :func:`judged`)."""

    return LoopBusyError


def _timed_out(exc: BaseException) -> bool:
    from redis.exceptions import TimeoutError

    return caused_by(exc, TimeoutError)


def judged(exc: Exception, took: float, late: float) -> Exception:
    """``exc``, the error of a round trip that took ``took`` seconds while the loop ran
    ``late`` seconds late; or, when ``exc`` is a Redis timeout and ``late`` at least half of
    ``took``, :func:`loop_busy`'s error from it (see the module's docs)."""
    if late < _MOSTLY * took or not _timed_out(exc):
        return exc
    busy = loop_busy()(
        f"{exc} after {took:.2f} s, of which this process's event loop ran {late:.2f} s late "
        "(its own load: Redis may have answered in time)"
    )
    busy.__cause__ = exc
    return busy
