"""Budget counters of this process: the pure policy behind one lock.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypedDict

from typing_extensions import Unpack

from .._state.steps import Step, in_place
from .policy import (
    ROLLING_BUCKETS,
    CounterSpec,
    CounterState,
    ReserveResult,
    SettleResult,
    add_hold,
    bring_to_now,
    decide,
    drop_hold,
    exhausted_alert,
    fire_alerts,
)

__all__ = ["BudgetBackend", "HoldArgs", "MemoryBudgetBackend", "Status"]

Status = tuple[int, int, float]
"""(settled spend, reserved amount, when the window resets), nano-dollars and epoch seconds."""


class HoldArgs(TypedDict):
    """What a reservation holds: ``base + tokens x per_token`` nano-dollars, with ``tokens``
    as high as ``want`` and at least ``minimum``, for ``ttl`` seconds unless settled first."""

    base: int
    per_token: float
    want: int
    minimum: int
    ttl: float


class BudgetBackend(Protocol):
    """Where budget counters live (this process, or Redis): the same contract for both.

    ``reserve`` holds a call's worst case (:class:`HoldArgs`) on every counter of ``specs``
    or on none. ``settle`` replaces the hold by ``actual`` (0 releases it) once per
    reservation id: a repeated settle changes nothing. Each operation is written once, as
    steps; the blocking and async entry points are derived from them.
    """

    def reserve_steps(
        self, rid: str, specs: Sequence[CounterSpec], **hold: Unpack[HoldArgs]
    ) -> Step[ReserveResult]:
        """Hold a call's worst case on every counter, all or nothing."""
        ...

    def settle_steps(
        self, rid: str, specs: Sequence[CounterSpec], *, actual: int, ttl: float
    ) -> Step[SettleResult]:
        """Turn reservation ``rid`` into ``actual`` spend (idempotent)."""
        ...

    def reserve(
        self, rid: str, specs: Sequence[CounterSpec], **hold: Unpack[HoldArgs]
    ) -> ReserveResult:
        """Blocking :meth:`reserve_steps`."""
        ...

    def settle(
        self, rid: str, specs: Sequence[CounterSpec], *, actual: int, ttl: float
    ) -> SettleResult:
        """Blocking :meth:`settle_steps`."""
        ...

    def status(self, specs: Sequence[CounterSpec]) -> list[Status]:
        """Each counter's settled spend, reserved amount and reset time."""
        ...

    async def areserve(
        self, rid: str, specs: Sequence[CounterSpec], **hold: Unpack[HoldArgs]
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


class _Deadlines:
    """Keys, each with a deadline that only moves later, expired oldest first: a touch is
    O(1), an expiry amortised O(log n) (a heap holds one entry per key; an entry whose key
    was touched since is pushed again at its new deadline when it comes up)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def touch(self, key: str, deadline: float) -> None:
        old = self.at.get(key)
        if old is None:
            heapq.heappush(self._heap, (deadline, key))
        if old is None or deadline > old:
            self.at[key] = deadline

    def expired(self, now: float) -> list[str]:
        """The keys whose deadline passed (forgotten here)."""
        gone: list[str] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, key = heapq.heappop(heap)
            deadline = self.at.get(key)
            if deadline is None:
                continue
            if deadline > now:
                heapq.heappush(heap, (deadline, key))
            else:
                del self.at[key]
                gone.append(key)
        return gone


_Settled = tuple[int | None, int]
"""A counter with nothing held, no alert fired and no rolling buckets: (window id, spent)."""

_SPAN = {"minute": 60.0, "hour": 3600.0, "day": 86400.0, "month": 31 * 86400.0}


class MemoryBudgetBackend:
    """Counters in this process's memory; ``clock`` (epoch seconds, UTC) is injectable.

    Nothing grows with calls: a settled reservation id is remembered (to make a repeated
    settle a no-op) until its ``ttl``, and a counter is dropped once idle past its window and
    its last hold, both through deadline-ordered heaps (amortised O(log n) per call).
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, CounterState | _Settled] = {}
        self._idle = _Deadlines()  # counters: when they can be dropped
        self._done = _Deadlines()  # settled reservation ids: until when remembered

    def _state(self, key: str) -> CounterState:
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = CounterState()
        elif isinstance(state, tuple):
            state = self._states[key] = CounterState(window_id=state[0], spent=state[1])
        return state

    def _settled(self, key: str, state: CounterState) -> None:
        """Keep a counter that holds nothing else as its window and spend only (a tenant's
        day counter outlives its last call by up to a day)."""
        if not (state.holds or state.fired or state.buckets or state.reserved):
            self._states[key] = (state.window_id, state.spent)

    def _expire(self, now: float) -> None:
        for key in self._idle.expired(now):
            self._states.pop(key, None)
        self._done.expired(now)

    def _used(self, spec: CounterSpec, now: float, until: float = 0.0) -> None:
        """Keep the counter while its window (or a hold until ``until``) may need it."""
        span = spec.rolling_seconds if spec.window == "rolling" else _SPAN[spec.window]
        self._idle.touch(spec.key, max(now + span, until))

    def counters(self) -> int:
        """How many counters are kept (idle ones are dropped)."""
        with self._lock:
            self._expire(self._clock())
            return len(self._states)

    def reserve(
        self, rid: str, specs: Sequence[CounterSpec], **hold: Unpack[HoldArgs]
    ) -> ReserveResult:
        """Hold a call's worst case on every counter, all or nothing."""
        base, per_token, minimum = hold["base"], hold["per_token"], hold["minimum"]
        with self._lock:
            now = self._clock()
            self._expire(now)
            states = [self._state(spec.key) for spec in specs]
            for spec in specs:
                self._used(spec, now)
            brought = [bring_to_now(s, spec, now) for s, spec in zip(states, specs, strict=True)]
            rooms = [
                spec.limit - s.spent - s.reserved for s, spec in zip(states, specs, strict=True)
            ]
            tokens, refused = decide(rooms, base, per_token, hold["want"], minimum)
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
            for state, spec in zip(states, specs, strict=True):
                add_hold(state, rid, amount, now + hold["ttl"])
                self._used(spec, now, now + hold["ttl"])
            return ReserveResult(True, tokens=tokens, amount=amount)

    def settle(
        self, rid: str, specs: Sequence[CounterSpec], *, actual: int, ttl: float
    ) -> SettleResult:
        """Turn reservation ``rid`` into ``actual`` spend (idempotent)."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            if rid in self._done.at:
                return SettleResult(False)
            self._done.touch(rid, now + ttl)
            spent, resets, fired = [], [], []
            for spec in specs:
                state = self._state(spec.key)
                self._used(spec, now)
                _, resets_at = bring_to_now(state, spec, now)
                drop_hold(state, rid)
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
                self._settled(spec.key, state)
            return SettleResult(True, tuple(spent), tuple(resets), tuple(fired))

    def status(self, specs: Sequence[CounterSpec]) -> list[Status]:
        """Each counter's settled spend, reserved amount and reset time."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            found: list[Status] = []
            for spec in specs:
                kept = self._states.get(spec.key)
                state = self._state(spec.key) if kept is not None else CounterState()
                spent, resets = bring_to_now(state, spec, now)
                found.append((spent, state.reserved, resets))
            return found

    reserve_steps, areserve = in_place(reserve)
    settle_steps, asettle = in_place(settle)
    astatus = in_place(status)[1]
