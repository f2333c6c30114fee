"""Breaker state in this process: one :class:`BreakerState` per route, behind a lock.

A route unheard of for :func:`forget_after` seconds is forgotten (its window with it), as
Redis expires a :class:`~llmguard_sdk.breaker.redis.RedisBreakerBackend`'s keys: breakers
keyed per tenant, host or key keep only those in use. An isolated breaker is kept until reset.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from .._state.steps import in_place
from ..errors import ConfigurationError
from .policy import (
    BreakerPolicy,
    BreakerState,
    Outcome,
    Permit,
    State,
    acquire,
    probe_passed,
    record,
    release,
)

__all__ = ["MemoryBreakerBackend", "breaker_policy", "forget_after", "idle_oldest"]

V = TypeVar("V")

FORGET_PER_CALL = 8
"""The most idle routes a call looks at to forget (each call adds at most one route, so a
backlog of routes that went idle together drains, a few a call, at a flat cost per call)."""


def breaker_policy(policy: object, owner: str) -> BreakerPolicy:
    """``policy`` when it is a :class:`BreakerPolicy`; else a :class:`ConfigurationError`
    naming ``owner``, at once rather than an AttributeError at the first call."""
    if not isinstance(policy, BreakerPolicy):
        raise ConfigurationError(f"a {owner} needs a BreakerPolicy, got {policy!r}")
    return policy


def forget_after(policy: BreakerPolicy) -> int:
    """Seconds after which a route's breaker nothing touched is forgotten: an hour, or twice
    the longest open duration or the window if longer (at most 2^31 s: Redis's ``EXPIRE``
    refuses what overflows its clock)."""
    idle = max(3600.0, policy.max_open_seconds * 2, policy.window * 2)
    return int(min(idle, 2**31 - 1))


def idle_oldest(
    entries: OrderedDict[str, V], now: float, idle_s: float, last: Callable[[V], float]
) -> list[str]:
    """The routes at the front of ``entries`` (least recently stored first; ``last``: when
    an entry was) idle for ``idle_s`` at ``now``: at most :data:`FORGET_PER_CALL`, oldest
    first, the others not looked at."""
    found: list[str] = []
    for route, entry in entries.items():
        if len(found) == FORGET_PER_CALL or now - last(entry) < idle_s:
            break
        found.append(route)
    return found


class MemoryBreakerBackend:
    """Per-route breakers of this process; ``clock`` is injectable for tests."""

    def __init__(
        self, policy: BreakerPolicy, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy = breaker_policy(policy, "MemoryBreakerBackend")
        if not callable(clock):
            raise ConfigurationError(f"clock: a callable returning seconds, got {clock!r}")
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, BreakerState] = {}
        # when each route's state was last stored, least recently first
        self._stored: OrderedDict[str, float] = OrderedDict()
        self._idle_s = forget_after(policy)

    def acquire(self, route: str) -> Permit:
        """A permit for one call to ``route`` (or a refusal with ``retry_after``)."""
        with self._lock:
            now = self._clock()
            permit, state = acquire(self._get(route, now), now, self.policy)
            self._put(route, state, now)
            return permit

    def record(
        self, route: str, outcome: Outcome, hint: float | None = None, probe: bool | None = None
    ) -> State:
        """Record a finished call (``probe``: whether its permit was a half-open probe);
        returns the breaker's state afterwards."""
        with self._lock:
            now = self._clock()
            state = record(self._get(route, now), now, self.policy, outcome, hint=hint, probe=probe)
            self._put(route, state, now)
            return state.state

    def release(self, route: str, probe: bool | None = None) -> None:
        """Give back a permit whose call has no outcome to record."""
        with self._lock:
            now = self._clock()
            self._put(route, release(self._get(route, now), probe), now)

    acquire_steps, aacquire = in_place(acquire)
    record_steps, arecord = in_place(record)
    release_steps, arelease = in_place(release)

    def end_open_wait(self, route: str) -> None:
        """A probe of ``route`` succeeded: an open breaker half-opens at the next permit."""
        with self._lock:
            now = self._clock()
            self._put(route, probe_passed(self._get(route, now)), now)

    def state(self, route: str) -> State:
        """The breaker's current state (an expired OPEN reads as OPEN until the next call)."""
        with self._lock:
            return self._get(route, self._clock()).state

    def isolate(self, route: str) -> None:
        """Open ``route``'s breaker until :meth:`reset`."""
        with self._lock:
            self._put(route, BreakerState(state="isolated"), self._clock())

    def reset(self, route: str) -> None:
        """Close ``route``'s breaker and forget its window."""
        with self._lock:
            self._put(route, _CLOSED, self._clock())

    def _get(self, route: str, now: float) -> BreakerState:
        """``route``'s state, a few of the routes idle for :func:`forget_after` forgotten
        first (:func:`idle_oldest`), and ``route`` itself if it is one of them."""
        stored = self._stored
        if not stored:  # nothing remembered (every route closed, its window empty)
            return _CLOSED
        for oldest in idle_oldest(stored, now, self._idle_s, float):
            self._forget(oldest, now)
        at = stored.get(route)
        if at is not None and now - at >= self._idle_s:
            self._forget(route, now)
        return self._states.get(route, _CLOSED)

    def _forget(self, route: str, now: float) -> None:
        """Forget idle ``route``, unless it is isolated (kept until reset: seen afresh)."""
        if self._states[route].state == "isolated":
            self._stored[route] = now
            self._stored.move_to_end(route)
        else:
            del self._stored[route], self._states[route]

    def _put(self, route: str, state: BreakerState, now: float) -> None:
        # nothing to remember: a closed breaker with an empty window (a window with counts
        # is not, and is told apart at once: nearly every record leaves one)
        if not state.window and state == _CLOSED:
            self._states.pop(route, None)
            self._stored.pop(route, None)
            return
        self._states[route] = state
        self._stored[route] = now
        self._stored.move_to_end(route)


_CLOSED = BreakerState()
"""A route with no state yet (shared: states are immutable)."""
