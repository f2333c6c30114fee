"""Breaker state in this process: one :class:`BreakerState` per route, behind a lock.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .._state.steps import in_place
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

__all__ = ["MemoryBreakerBackend"]


class MemoryBreakerBackend:
    """Per-route breakers of this process; ``clock`` is injectable for tests."""

    def __init__(
        self, policy: BreakerPolicy, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, BreakerState] = {}

    def acquire(self, route: str) -> Permit:
        """A permit for one call to ``route`` (or a refusal with ``retry_after``)."""
        with self._lock:
            permit, self._states[route] = acquire(self._get(route), self._clock(), self.policy)
            return permit

    def record(
        self, route: str, outcome: Outcome, hint: float | None = None, probe: bool | None = None
    ) -> State:
        """Record a finished call (``probe``: whether its permit was a half-open probe);
        returns the breaker's state afterwards."""
        with self._lock:
            now = self._clock()
            state = record(self._get(route), now, self.policy, outcome, hint=hint, probe=probe)
            self._states[route] = state
            return state.state

    def release(self, route: str, probe: bool | None = None) -> None:
        """Give back a permit whose call has no outcome to record."""
        with self._lock:
            self._states[route] = release(self._get(route), probe)

    acquire_steps, aacquire = in_place(acquire)
    record_steps, arecord = in_place(record)
    release_steps, arelease = in_place(release)

    def end_open_wait(self, route: str) -> None:
        """A probe of ``route`` succeeded: an open breaker half-opens at the next permit."""
        with self._lock:
            self._states[route] = probe_passed(self._get(route))

    def state(self, route: str) -> State:
        """The breaker's current state (an expired OPEN reads as OPEN until the next call)."""
        with self._lock:
            return self._get(route).state

    def isolate(self, route: str) -> None:
        """Open ``route``'s breaker until :meth:`reset`."""
        with self._lock:
            self._states[route] = BreakerState(state="isolated")

    def reset(self, route: str) -> None:
        """Close ``route``'s breaker and forget its window."""
        with self._lock:
            self._states[route] = _CLOSED

    def _get(self, route: str) -> BreakerState:
        return self._states.get(route, _CLOSED)


_CLOSED = BreakerState()
"""A route with no state yet (shared: states are immutable)."""
