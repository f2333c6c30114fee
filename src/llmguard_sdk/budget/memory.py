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

from .._state.deadlines import Deadlines
from .._state.steps import Step, in_place
from ._spend import SpendTable
from .policy import (
    _NO_ALERTS,
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
    window_bounds,
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


_GRANTED = ReserveResult(True).__dict__


def _granted(tokens: int, amount: int) -> ReserveResult:
    """``ReserveResult(True, tokens=tokens, amount=amount)``, made without the frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` per field of nine: more than the
    rest of a reservation's bookkeeping)."""
    made = object.__new__(ReserveResult)
    made.__dict__.update(_GRANTED, tokens=tokens, amount=amount)
    return made


_SPAN = {"minute": 60.0, "hour": 3600.0, "day": 86400.0, "month": 31 * 86400.0}
_LATE_SETTLE_SECONDS = 86400.0
"""How long past its hold a reservation can still be settled (a call that outlived its
deadline still counts what it spent); a settle after that changes nothing."""


class MemoryBudgetBackend:
    """Counters in this process's memory; ``clock`` (epoch seconds, UTC) is injectable.

    Nothing grows with calls, and a tenant that called once costs a key digest and its
    spend (24 to 48 bytes) until its window ends:

    * a reservation id is remembered from its reserve to its settle (or a day past its
      hold), then forgotten: a repeated settle, like the settle of an id this backend never
      reserved, finds nothing and changes nothing (``SettleResult(applied=False)``);
    * a calendar-window counter with nothing held is kept as its spend alone (with the
      alerts it fired), in one compact table per window (a 64-bit digest of its key and a
      machine word) that is dropped whole when the window ends;
    * a counter with holds in flight, or a rolling window's buckets, keeps its whole state
      until idle past its window and its last hold.

    Expiry goes through deadline-ordered heaps (amortised O(log n) per call), never a scan.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, CounterState] = {}  # counters with holds or rolling buckets
        self._idle = Deadlines()  # those counters: when they can be dropped
        self._quiet: dict[float, SpendTable] = {}  # window end: key: spend (and alerts)
        self._quiet_ends: list[float] = []  # heap of the ends of ``_quiet``
        self._open = Deadlines()  # reserved, not yet settled ids: until when settleable

    def _state(
        self, spec: CounterSpec, now: float, *, take: bool = True, keep: bool = True
    ) -> CounterState:
        """The counter's whole state (out of its window's quiet table when it is there);
        ``take=False`` reads without keeping a new state; ``keep=False``: a new state is
        kept without an expiry (the caller parks it at once)."""
        state = self._states.get(spec.key)
        if state is not None:
            return state
        state = CounterState()
        if spec.window != "rolling":
            window_id, end = window_bounds(spec.window, now, spec.tz)
            table = self._quiet.get(end)
            found = None
            if table is not None:
                found = table.pop(spec.key) if take else table.get(spec.key)
            if found is not None:
                state.window_id = window_id
                state.spent, state.fired = found[0], found[1] or _NO_ALERTS
        if take:  # kept from now on, so it expires even if the caller never parks it
            self._states[spec.key] = state
            if keep:
                self._keep(spec, now, now)
        return state

    def _keep(self, spec: CounterSpec, now: float, until: float) -> None:
        """Keep a whole state until idle past its window (and a hold until ``until``)."""
        rolling = spec.rolling_seconds * (ROLLING_BUCKETS + 1) / ROLLING_BUCKETS  # (its life)
        span = rolling if spec.window == "rolling" else _SPAN[spec.window]
        self._idle.touch(spec.key, max(now + span, until))

    def _park(self, spec: CounterSpec, state: CounterState, now: float, until: float) -> None:
        """Keep a counter as small as it can be: a calendar one that holds nothing as its
        spend in its window's table (nothing at all when it spent nothing), else its state
        until idle past its window (and a hold until ``until``)."""
        if state.holds or state.reserved or state.buckets:
            self._keep(spec, now, until)
            return
        self._states.pop(spec.key, None)  # (a key given twice is parked once)
        self._idle.forget(spec.key)
        if spec.window == "rolling" or not (state.spent or state.fired):
            return
        _, end = window_bounds(spec.window, now, spec.tz)
        table = self._quiet.get(end)
        if table is None:
            table = self._quiet[end] = SpendTable()
            heapq.heappush(self._quiet_ends, end)
        table.put(spec.key, state.spent, state.fired)

    def _expire(self, now: float) -> None:
        for key in self._idle.expired(now):
            self._states.pop(key, None)
        self._open.expired(now)
        ends = self._quiet_ends
        while ends and ends[0] <= now:
            self._quiet.pop(heapq.heappop(ends), None)

    def counters(self) -> int:
        """How many counters are kept (idle ones are dropped)."""
        with self._lock:
            self._expire(self._clock())
            return len(self._states) + sum(len(table) for table in self._quiet.values())

    def open_reservations(self) -> int:
        """How many reservation ids are remembered: those reserved and not settled yet
        (settled ones are forgotten)."""
        with self._lock:
            self._expire(self._clock())
            return len(self._open.at)

    def reserve(
        self, rid: str, specs: Sequence[CounterSpec], **hold: Unpack[HoldArgs]
    ) -> ReserveResult:
        """Hold a call's worst case on every counter, all or nothing."""
        base, per_token, minimum = hold["base"], hold["per_token"], hold["minimum"]
        with self._lock:
            now = self._clock()
            self._expire(now)
            states, brought, rooms = [], [], []
            for spec in specs:  # (each is parked below, whatever the answer)
                state = self._state(spec, now, keep=False)
                brought.append(bring_to_now(state, spec, now))
                states.append(state)
                rooms.append(spec.limit - state.spent - state.reserved)
            tokens, refused = decide(rooms, base, per_token, hold["want"], minimum)
            if refused >= 0:
                state, need = states[refused], base + max(minimum, 0) * per_token
                held_back = bool(state.holds) and state.spent + need <= specs[refused].limit
                result = ReserveResult(
                    False,
                    refused_index=refused,
                    spent=state.spent,
                    reserved=state.reserved,
                    resets_at=brought[refused][1],
                    alerted=exhausted_alert(state, specs[refused], need),
                    # held back by calls in flight: room comes back as their holds go
                    frees_at=min(until for _, until in state.holds.values()) if held_back else 0.0,
                )
                for state, spec in zip(states, specs, strict=True):
                    self._park(spec, state, now, now)
                return result
            amount = -int(-(base + tokens * per_token) // 1)  # ceil
            until = now + hold["ttl"]
            for state, spec in zip(states, specs, strict=True):
                add_hold(state, rid, amount, until)
                self._park(spec, state, now, until)
            self._open.touch(rid, until + _LATE_SETTLE_SECONDS)
            return _granted(tokens, amount)

    def settle(
        self, rid: str, specs: Sequence[CounterSpec], *, actual: int, ttl: float
    ) -> SettleResult:
        """Turn reservation ``rid`` into ``actual`` spend (idempotent: only an id reserved
        here and not settled yet applies; ``ttl`` is for shared stores, which remember
        settled ids, and is not needed here)."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            if not self._open.forget(rid):
                return SettleResult(False)
            spent, resets, fired = [], [], []
            for spec in specs:
                state = self._state(spec, now)
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
                self._park(spec, state, now, now)
            return SettleResult(True, tuple(spent), tuple(resets), tuple(fired))

    def status(self, specs: Sequence[CounterSpec]) -> list[Status]:
        """Each counter's settled spend, reserved amount and reset time."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            found: list[Status] = []
            for spec in specs:
                state = self._state(spec, now, take=False)
                spent, resets = bring_to_now(state, spec, now)
                found.append((spent, state.reserved, resets))
            return found

    reserve_steps, areserve = in_place(reserve)
    settle_steps, asettle = in_place(settle)
    astatus = in_place(status)[1]
