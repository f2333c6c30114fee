"""Rate limits of this process: one :class:`~llmguard_sdk.ratelimit.CellState` per limit
(and per tenant for per-tenant limits), behind a lock.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import anyio
from typing_extensions import Unpack

from .._state.recent import Recent
from .._state.steps import Call, Step, in_place
from .._state.stores import hash_id
from ._rules import LimiterBase, LimitsConfig, check_args, metered
from .policy import (
    CONCURRENCY_POLL,
    CellState,
    Grant,
    LearnArgs,
    RateLimit,
    ReserveArgs,
    SettleArgs,
    learn,
    release,
    reserve_all,
    settle,
)

__all__ = ["MemoryRateLimiter"]

CellKey = tuple[str, int, str | None]
_Cells = tuple[tuple[CellKey, "RateLimit"], ...]
_Kwargs = dict[str, object]
_RECENT_KEYS = 4096  # (key, tenant)s whose cells a limiter remembers
# the state of a cell not kept (one shared instance: states are replaced, never changed)
_NEW_CELL = CellState()


class MemoryRateLimiter(LimiterBase):
    """Reserve-then-settle limits for any number of keys; ``clock`` is injectable for tests.

    ::

        limiter = MemoryRateLimiter({"openai": RateLimit(rpm=500, tpm=200_000)})
        grant = limiter.reserve("openai", tokens=1_200)
        if grant.allowed:
            time.sleep(grant.wait)  # its slot (0 unless a max_wait let it wait)
            ...  # call, then:
            limiter.settle("openai", token_delta=actual_tokens - 1_200, lease=grant.lease)

    ``limits`` maps a key to one :class:`~llmguard_sdk.ratelimit.RateLimit` or several that
    all apply (a route's own and a per-tenant one, say). Keys without limits always pass;
    the first time one is asked for, a :class:`~llmguard_sdk.RateLimitConfigWarning` says so
    (a misspelt key would leave its limits unapplied). ``limits`` is read-only afterwards:
    :meth:`set_limits` replaces a key's.
    """

    def __init__(
        self, limits: LimitsConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(limits)
        self._clock = clock
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        # the cells of the (key, tenant)s seen lately: a bounded table
        self._recent_keys = Recent(self._cells_of, _RECENT_KEYS)
        self._cells: OrderedDict[CellKey, CellState] = (
            OrderedDict()
        )  # least recently reserved first
        # per-tenant token cells with calls that may still settle on them (a debit on a
        # forgotten cell would be lost): how many, and until when at the latest (their leases)
        self._held: dict[CellKey, tuple[int, float]] = {}

    def _replace(self, key: str, rules: tuple[RateLimit, ...]) -> None:
        """:meth:`set_limits`, under the lock: ``key``'s cells are found afresh; one whose
        limit meters differently starts from no TATs (its leases and queue kept: calls in
        flight and waiting, as in Redis); one of a limit gone, or now per tenant or no
        longer, is dropped (nothing reads it any more)."""
        with self._lock:
            before = self.rules(key)
            super()._replace(key, rules)
            self._recent_keys = Recent(self._cells_of, _RECENT_KEYS)
            for name in [name for name in self._cells if name[0] == key]:
                index = name[1]
                old, new = before[index], rules[index] if index < len(rules) else None
                if new is None or new.per_tenant != old.per_tenant:
                    del self._cells[name]
                    self._held.pop(name, None)
                elif metered(new) != metered(old):
                    state = self._cells[name]
                    self._cells[name] = CellState(
                        leases=state.leases, queue=state.queue, paused=state.paused
                    )

    def _keys(self, key: str, tenant: str | None) -> _Cells:
        return self._recent_keys((key, tenant))

    def _cells_of(self, asked: tuple[str, str | None]) -> _Cells:
        """The cells of ``key``'s limits for ``tenant`` (per-tenant ones by its hash)."""
        key, tenant = asked
        tenant_key = hash_id(tenant or "")
        return tuple(
            ((key, index, tenant_key if limit.per_tenant else None), limit)
            for index, limit in enumerate(self.rules(key))
        )

    def _try(
        self,
        cells: tuple[tuple[CellKey, RateLimit], ...],
        call_id: str,
        kwargs: dict[str, object],
    ) -> Grant:
        """One reservation attempt, under the lock."""
        kept = self._cells
        states = [(kept.get(name, _NEW_CELL), limit) for name, limit in cells]
        now = self._clock()
        grant, after = reserve_all(states, now, call_id=call_id, **kwargs)  # type: ignore[arg-type]
        for (name, _), state in zip(cells, after, strict=True):
            kept[name] = state
            kept.move_to_end(name)
        if grant.allowed:
            self._hold(cells, now + grant.wait, kwargs.get("lease_seconds"))
        self._forget_idle(now, len(cells) + 1)
        return grant

    def _hold(self, cells: _Cells, sent: float, lease_seconds: object) -> None:
        """Keep the per-tenant token cells of a call sent at ``sent`` until it settles (at
        the latest until its lease ends)."""
        for name, limit in cells:
            if name[2] is None or limit.limits()[1:] == (None, None, None):
                continue
            held = limit.lease_seconds
            if isinstance(lease_seconds, (int, float)):
                held = min(held, lease_seconds)
            calls, until = self._held.get(name, (0, sent))
            self._held[name] = (calls + 1, max(until, sent + held))

    def _unhold(self, cells: _Cells) -> None:
        """A call on ``cells`` settled (or gave its lease back): one fewer may settle."""
        for name, _ in cells:
            held = self._held.get(name)
            if held is not None:
                if held[0] <= 1:
                    del self._held[name]
                else:
                    self._held[name] = (held[0] - 1, held[1])

    def _forget_idle(self, now: float, looks: int) -> None:
        """Look at the ``looks`` cells reserved longest ago: forget each per-tenant one that
        is idle (back at its defaults), send the others to the back. A few looks a call, more
        than the call adds, so idle tenants cost nothing for long and no call scans them all."""
        kept = self._cells
        for _ in range(min(looks, len(kept))):
            name = next(iter(kept))
            held = self._held.get(name)
            if name[2] is not None and kept[name].idle(now) and (held is None or held[1] <= now):
                del kept[name]
                self._held.pop(name, None)
            else:
                kept.move_to_end(name)

    def _asked(self, key: str, ask: ReserveArgs) -> tuple[_Cells, str, _Kwargs, float]:
        """(cells, call id, the policy's keywords, until when the call may wait)."""
        kwargs: dict[str, object] = dict(ask)  # the policy's keywords: all but these two
        cells = self._keys(key, kwargs.pop("tenant", None))  # type: ignore[arg-type]
        lease, named = kwargs.pop("lease", None), self.call_id(key)
        until = time.monotonic() + self.wait_bound(key, ask.get("max_wait"))
        return cells, str(lease or named) if named else "", kwargs, until

    def reserve(self, key: str, **ask: Unpack[ReserveArgs]) -> Grant:
        """Reserve a call on ``key`` (and on ``tenant``'s per-tenant limits), all or none;
        see :func:`~llmguard_sdk.ratelimit.reserve_all`. A call that finds every
        concurrency slot taken waits here (bounded by ``max_wait`` and the limits' own) for
        one to be given back."""
        check_args(ask, ReserveArgs, "reserve")
        self._configured(key)
        asked = self._asked(key, ask)
        first = self._first_try(*asked)
        return first if first is not None else self._wait(*asked)

    async def areserve(self, key: str, **ask: Unpack[ReserveArgs]) -> Grant:
        """Async twin of :meth:`reserve` (waits for a concurrency slot without blocking the
        event loop)."""
        check_args(ask, ReserveArgs, "reserve")
        self._configured(key)
        asked = self._asked(key, ask)
        first = self._first_try(*asked)
        return first if first is not None else await self._await(*asked)

    def reserve_steps(self, key: str, **ask: Unpack[ReserveArgs]) -> Step[Grant]:
        """:meth:`reserve` as a step: decided in place, unless the call must wait for a
        concurrency slot (then it waits the blocking or the async way of the code that runs
        it)."""
        check_args(ask, ReserveArgs, "reserve")
        self._configured(key)
        return self._reserve_steps(key, ask)

    def _reserve_steps(self, key: str, ask: ReserveArgs) -> Step[Grant]:
        """:meth:`reserve_steps` without the checks of its arguments (the Guard's own)."""
        asked = self._asked(key, ask)
        first = self._first_try(*asked)
        if first is not None:
            return first
        grant: Grant = yield Call(lambda: self._wait(*asked), lambda: self._await(*asked))
        return grant

    def _first_try(
        self, cells: _Cells, call_id: str, kwargs: _Kwargs, until: float
    ) -> Grant | None:
        """The reservation's first attempt: its grant, or None when it queued for a
        concurrency slot and has time left to wait for one."""
        if not cells:
            return Grant(True)
        with self._lock:
            grant, left = self._step(cells, call_id, kwargs, until)
        return None if left else grant

    def _wait(self, cells: _Cells, call_id: str, kwargs: _Kwargs, until: float) -> Grant:
        """Try again each time a slot is given back (at least once a second) until ``until``.
        A queued call waits before it asks again: at once, it would take a slot freed
        meanwhile from a call that waited longer (its first ask just queued it)."""
        with self._freed:
            pause = CONCURRENCY_POLL  # (a slot freed before this lock was taken: no notice)
            while True:
                self._freed.wait(max(0.0, min(until - time.monotonic(), pause)))
                grant, left = self._step(cells, call_id, _what_is_left(kwargs, until), until)
                if not left:
                    return grant
                pause = 1.0

    async def _await(self, cells: _Cells, call_id: str, kwargs: _Kwargs, until: float) -> Grant:
        """Async twin of :meth:`_wait`: asks again every ``CONCURRENCY_POLL`` seconds."""
        while True:
            await anyio.sleep(max(0.0, min(until - time.monotonic(), CONCURRENCY_POLL)))
            with self._lock:
                grant, left = self._step(cells, call_id, _what_is_left(kwargs, until), until)
            if not left:
                return grant

    def _step(
        self, cells: _Cells, call_id: str, kwargs: _Kwargs, until: float
    ) -> tuple[Grant, float]:
        """One reservation attempt, under the lock, as every driver takes it: ``(grant, 0)``
        when the grant is final, or ``(grant, seconds left)`` when the call queued for a
        concurrency slot and may wait that long for one (it keeps its place meanwhile)."""
        grant = self._try(cells, call_id, kwargs)
        if grant.allowed and not grant.queued:
            return grant, 0.0
        left = until - time.monotonic()
        if left <= 0 or not grant.queued:
            return self._gave_up(cells, call_id, grant), 0.0
        return grant, left

    def _gave_up(self, cells: _Cells, call_id: str, grant: Grant) -> Grant:
        """A call that queued for a slot ends without one: it leaves the queue now (its
        place would lapse only a moment later, and shed a call meanwhile). Under the lock."""
        now = self._clock()
        for name, _ in cells:
            state = self._cells.get(name)
            if state is not None and call_id in state.queue:
                self._cells[name] = release(state, now, call_id)
        return _final(grant)

    def learn(self, key: str, **taught: Unpack[LearnArgs]) -> None:
        """Bring ``key``'s route-wide state down to what the provider reported (per-tenant
        limits are ours, not the provider's: they are left alone)."""
        check_args(taught, LearnArgs, "learn")
        self._configured(key)
        self._learn(key, taught)

    def _learn(self, key: str, taught: LearnArgs) -> None:
        """:meth:`learn` without the checks of its arguments (the Guard's own)."""
        with self._lock:
            now = self._clock()
            for name, limit in self._keys(key, None):
                if not limit.per_tenant:
                    self._cells[name] = learn(
                        self._cells.get(name, _NEW_CELL), now, limit, **taught
                    )

    def settle(self, key: str, **settled: Unpack[SettleArgs]) -> None:
        """Correct a reservation on ``key`` to what the call really used, and give its
        concurrency ``lease`` back (``request_delta=-1``: and its request)."""
        check_args(settled, SettleArgs, "settle")
        self._configured(key)
        self._settle(key, settled)

    def _settle(self, key: str, settled: SettleArgs) -> None:
        """:meth:`settle` without the checks of its arguments (the Guard's own)."""
        corrections: dict[str, object] = dict(settled)  # the policy's keywords: all but the tenant
        cells = self._keys(key, corrections.pop("tenant", None))  # type: ignore[arg-type]
        with self._lock:  # (the lock of ``_freed``)
            kept = self._cells
            now = self._clock()
            for name, limit in cells:
                kept[name] = settle(
                    kept.get(name, _NEW_CELL),
                    now,
                    limit,
                    **corrections,  # type: ignore[arg-type]
                )
            self._unhold(cells)
            if settled.get("lease") is not None:
                self._freed.notify_all()

    def release(self, key: str, *, tenant: str | None = None, lease: str) -> None:
        """Give a concurrency lease back without settling tokens."""
        self._configured(key)
        with self._freed:
            now = self._clock()
            for name, _limit in self._keys(key, tenant):
                state = self._cells.get(name)
                if state is not None:
                    self._cells[name] = release(state, now, lease)
            self._unhold(self._keys(key, tenant))
            self._freed.notify_all()

    settle_steps, asettle = in_place(settle)
    learn_steps, alearn = in_place(learn)
    _settle_steps = in_place(_settle)[0]  # (the Guard's: unchecked)
    _learn_steps = in_place(_learn)[0]
    release_steps, arelease = in_place(release)

    def in_flight(self, key: str, *, tenant: str | None = None) -> int:
        """Calls holding a concurrency lease on ``key`` now (the most of any of its limits)."""
        with self._lock:
            now = self._clock()
            return max(
                (
                    sum(1 for until in self._cells.get(n, _NEW_CELL).leases.values() if until > now)
                    for n, _ in self._keys(key, tenant)
                ),
                default=0,
            )


def _what_is_left(kwargs: _Kwargs, until: float) -> _Kwargs:
    """A queued call's keywords when it asks again: it may wait only what is left of its
    wait (for the rate too, and its place in the queue lapses when that ends)."""
    return {**kwargs, "max_wait": max(0.0, until - time.monotonic())}


def _final(grant: Grant) -> Grant:
    """A refusal after the wait for a slot: no longer queued."""
    if grant.queued:
        return Grant(False, grant.retry_after, reason=grant.reason)
    return grant
