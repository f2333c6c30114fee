"""Budget counters of this process: the pure policy behind one lock.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from .policy import (
    ROLLING_BUCKETS,
    CounterSpec,
    CounterState,
    ReserveResult,
    SettleResult,
    bring_to_now,
    decide,
    exhausted_alert,
    fire_alerts,
)

__all__ = ["BudgetBackend", "MemoryBudgetBackend", "Status"]

Status = tuple[int, int, float]
"""(settled spend, reserved amount, when the window resets), nano-dollars and epoch seconds."""


class BudgetBackend(Protocol):
    """Where budget counters live (this process, or Redis): the same contract for both.

    ``reserve`` holds ``base + tokens x per_token`` nano-dollars on every counter of
    ``specs`` or on none, with ``tokens`` as high as ``want`` and at least ``minimum``; the
    hold expires after ``ttl`` seconds unless settled first. ``settle`` replaces the hold by
    ``actual`` (0 releases it) once per reservation id: a repeated settle changes nothing.
    """

    def reserve(
        self,
        rid: str,
        specs: Sequence[CounterSpec],
        *,
        base: int,
        per_token: float,
        want: int,
        minimum: int,
        ttl: float,
    ) -> ReserveResult:
        """Hold a call's worst case on every counter, all or nothing."""
        ...

    def settle(
        self, rid: str, specs: Sequence[CounterSpec], *, actual: int, ttl: float
    ) -> SettleResult:
        """Turn reservation ``rid`` into ``actual`` spend (idempotent)."""
        ...

    def status(self, specs: Sequence[CounterSpec]) -> list[Status]:
        """Each counter's settled spend, reserved amount and reset time."""
        ...

    async def areserve(
        self,
        rid: str,
        specs: Sequence[CounterSpec],
        *,
        base: int,
        per_token: float,
        want: int,
        minimum: int,
        ttl: float,
    ) -> ReserveResult:
        """Async twin of :meth:`reserve`."""
        ...

    async def asettle(
        self, rid: str, specs: Sequence[CounterSpec], *, actual: int, ttl: float
    ) -> SettleResult:
        """Async twin of :meth:`settle`."""
        ...

    async def astatus(self, specs: Sequence[CounterSpec]) -> list[Status]:
        """Async twin of :meth:`status`."""
        ...


class MemoryBudgetBackend:
    """Counters in this process's memory; ``clock`` (epoch seconds, UTC) is injectable."""

    inline_steps: ClassVar[frozenset[str]] = frozenset({"reserve", "settle"})
    """Methods that never wait: a :class:`~llmguard_sdk._state.steps.Batch` calls them in place."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, CounterState] = {}
        self._done: dict[str, float] = {}  # settled reservation ids: until when remembered

    def _state(self, key: str) -> CounterState:
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = CounterState()
        return state

    def reserve(
        self,
        rid: str,
        specs: Sequence[CounterSpec],
        *,
        base: int,
        per_token: float,
        want: int,
        minimum: int,
        ttl: float,
    ) -> ReserveResult:
        """Hold a call's worst case on every counter, all or nothing."""
        with self._lock:
            now = self._clock()
            states = [self._state(spec.key) for spec in specs]
            brought = [bring_to_now(s, spec, now) for s, spec in zip(states, specs, strict=True)]
            rooms = [
                spec.limit - s.spent - s.reserved for s, spec in zip(states, specs, strict=True)
            ]
            tokens, refused = decide(rooms, base, per_token, want, minimum)
            if refused >= 0:
                state = states[refused]
                return ReserveResult(
                    False,
                    refused_index=refused,
                    spent=state.spent,
                    reserved=state.reserved,
                    resets_at=brought[refused][1],
                    alerted=exhausted_alert(
                        state, specs[refused], base + max(minimum, 0) * per_token
                    ),
                )
            amount = -int(-(base + tokens * per_token) // 1)  # ceil
            for state in states:
                state.reserved += amount
                state.holds[rid] = (amount, now + ttl)
            return ReserveResult(True, tokens=tokens, amount=amount)

    def settle(
        self, rid: str, specs: Sequence[CounterSpec], *, actual: int, ttl: float
    ) -> SettleResult:
        """Turn reservation ``rid`` into ``actual`` spend (idempotent)."""
        with self._lock:
            now = self._clock()
            for done in [d for d, until in self._done.items() if until <= now]:
                del self._done[done]
            if rid in self._done:
                return SettleResult(False)
            self._done[rid] = now + ttl
            spent, resets, fired = [], [], []
            for spec in specs:
                state = self._state(spec.key)
                _, resets_at = bring_to_now(state, spec, now)
                hold = state.holds.pop(rid, None)
                if hold is not None:
                    state.reserved -= hold[0]
                if actual > 0:
                    if spec.window == "rolling":
                        index = math.floor(now / (spec.rolling_seconds / ROLLING_BUCKETS))
                        state.buckets[index] = state.buckets.get(index, 0) + actual
                        _, resets_at = bring_to_now(state, spec, now)
                    else:
                        state.spent += actual
                spent.append(state.spent)
                resets.append(resets_at)
                fired.append(fire_alerts(state, spec))
            return SettleResult(True, tuple(spent), tuple(resets), tuple(fired))

    def status(self, specs: Sequence[CounterSpec]) -> list[Status]:
        """Each counter's settled spend, reserved amount and reset time."""
        with self._lock:
            now = self._clock()
            found: list[Status] = []
            for spec in specs:
                state = self._state(spec.key)
                spent, resets = bring_to_now(state, spec, now)
                found.append((spent, state.reserved, resets))
            return found

    async def areserve(
        self,
        rid: str,
        specs: Sequence[CounterSpec],
        *,
        base: int,
        per_token: float,
        want: int,
        minimum: int,
        ttl: float,
    ) -> ReserveResult:
        """Same as :meth:`reserve` (no I/O)."""
        return self.reserve(
            rid, specs, base=base, per_token=per_token, want=want, minimum=minimum, ttl=ttl
        )

    async def asettle(
        self, rid: str, specs: Sequence[CounterSpec], *, actual: int, ttl: float
    ) -> SettleResult:
        """Same as :meth:`settle` (no I/O)."""
        return self.settle(rid, specs, actual=actual, ttl=ttl)

    async def astatus(self, specs: Sequence[CounterSpec]) -> list[Status]:
        """Same as :meth:`status` (no I/O)."""
        return self.status(specs)
