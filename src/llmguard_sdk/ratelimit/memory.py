"""Rate limits of this process: one :class:`~llmguard_sdk.ratelimit.CellState` per limit
(and per tenant for per-tenant limits), behind a lock.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import ClassVar

import anyio

from .._state.stores import hash_id
from ._rules import LimitsConfig, Rules, new_call_id, normalize, wait_bound
from .policy import (
    CellState,
    Grant,
    Priority,
    RateLimit,
    learn,
    release,
    reserve_all,
    settle,
)

__all__ = ["MemoryRateLimiter"]

_SWEEP_EVERY = 4096  # reservations between sweeps of idle per-tenant states

CellKey = tuple[str, int, str | None]


class MemoryRateLimiter:
    """Reserve-then-settle limits for any number of keys; ``clock`` is injectable for tests.

    ::

        limiter = MemoryRateLimiter({"openai": RateLimit(rpm=500, tpm=200_000)})
        grant = limiter.reserve("openai", tokens=1_200)
        if grant.allowed:
            ...  # call, then:
            limiter.settle("openai", token_delta=actual_tokens - 1_200, lease=grant.lease)

    ``limits`` maps a key to one :class:`~llmguard_sdk.ratelimit.RateLimit` or several that
    all apply (a route's own and a per-tenant one, say). Keys without limits always pass.
    """

    inline_steps: ClassVar[frozenset[str]] = frozenset({"settle", "learn", "release"})
    """Methods that never wait: a :class:`~llmguard_sdk._state.steps.Batch` calls them in place."""

    def __init__(
        self, limits: LimitsConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits: Rules = normalize(limits)
        self._clock = clock
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._cells: dict[CellKey, CellState] = {}
        self._reservations = 0

    def rules(self, key: str) -> tuple[RateLimit, ...]:
        """The limits that apply on ``key`` (empty: none)."""
        return self.limits.get(key, ())

    def _keys(self, key: str, tenant: str | None) -> list[tuple[CellKey, RateLimit]]:
        tenant_key = hash_id(tenant or "")
        return [
            ((key, index, tenant_key if limit.per_tenant else None), limit)
            for index, limit in enumerate(self.rules(key))
        ]

    def _try(
        self,
        cells: list[tuple[CellKey, RateLimit]],
        call_id: str,
        kwargs: dict[str, object],
    ) -> Grant:
        """One reservation attempt, under the lock."""
        states = [(self._cells.get(name, CellState()), limit) for name, limit in cells]
        now = self._clock()
        grant, after = reserve_all(states, now, call_id=call_id, **kwargs)  # type: ignore[arg-type]
        for (name, _), state in zip(cells, after, strict=True):
            self._cells[name] = state
        self._reservations += 1
        if self._reservations % _SWEEP_EVERY == 0:
            for name in [n for n, s in self._cells.items() if n[2] is not None and s.idle(now)]:
                del self._cells[name]
        return grant

    def reserve(
        self,
        key: str,
        *,
        tenant: str | None = None,
        requests: float = 1.0,
        tokens: float = 0.0,
        input_tokens: float | None = None,
        output_tokens: float | None = None,
        priority: Priority = "interactive",
        max_wait: float | None = None,
        lease_seconds: float | None = None,
    ) -> Grant:
        """Reserve a call on ``key`` (and on ``tenant``'s per-tenant limits), all or none;
        see :func:`~llmguard_sdk.ratelimit.reserve_all`. A call that finds every
        concurrency slot taken waits here (bounded by ``max_wait`` and the limits' own) for
        one to be given back."""
        cells = self._keys(key, tenant)
        if not cells:
            return Grant(True)
        kwargs: dict[str, object] = {
            "requests": requests,
            "tokens": tokens,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "priority": priority,
            "max_wait": max_wait,
            "lease_seconds": lease_seconds,
        }
        call_id = new_call_id()
        until = time.monotonic() + wait_bound([limit for _, limit in cells], max_wait)
        with self._freed:
            while True:
                grant = self._try(cells, call_id, kwargs)
                left = until - time.monotonic()
                if not grant.queued or left <= 0:
                    return _final(grant)
                self._freed.wait(min(left, 1.0))

    async def areserve(
        self,
        key: str,
        *,
        tenant: str | None = None,
        requests: float = 1.0,
        tokens: float = 0.0,
        input_tokens: float | None = None,
        output_tokens: float | None = None,
        priority: Priority = "interactive",
        max_wait: float | None = None,
        lease_seconds: float | None = None,
    ) -> Grant:
        """Async twin of :meth:`reserve` (waits for a concurrency slot without blocking the
        event loop)."""
        cells = self._keys(key, tenant)
        if not cells:
            return Grant(True)
        kwargs: dict[str, object] = {
            "requests": requests,
            "tokens": tokens,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "priority": priority,
            "max_wait": max_wait,
            "lease_seconds": lease_seconds,
        }
        call_id = new_call_id()
        until = time.monotonic() + wait_bound([limit for _, limit in cells], max_wait)
        while True:
            with self._lock:
                grant = self._try(cells, call_id, kwargs)
            left = until - time.monotonic()
            if not grant.queued or left <= 0:
                return _final(grant)
            await anyio.sleep(min(left, grant.retry_after))

    def learn(
        self,
        key: str,
        *,
        remaining_requests: float | None = None,
        remaining_tokens: float | None = None,
        remaining_input_tokens: float | None = None,
        remaining_output_tokens: float | None = None,
        pause: float | None = None,
    ) -> None:
        """Bring ``key``'s route-wide state down to what the provider reported (per-tenant
        limits are ours, not the provider's: they are left alone)."""
        with self._lock:
            now = self._clock()
            for name, limit in self._keys(key, None):
                if limit.per_tenant:
                    continue
                self._cells[name] = learn(
                    self._cells.get(name, CellState()),
                    now,
                    limit,
                    remaining_requests=remaining_requests,
                    remaining_tokens=remaining_tokens,
                    remaining_input_tokens=remaining_input_tokens,
                    remaining_output_tokens=remaining_output_tokens,
                    pause=pause,
                )

    def settle(
        self,
        key: str,
        *,
        tenant: str | None = None,
        token_delta: float = 0.0,
        input_delta: float | None = None,
        output_delta: float | None = None,
        lease: str | None = None,
        request_delta: float = 0.0,
    ) -> None:
        """Correct a reservation on ``key`` to what the call really used, and give its
        concurrency ``lease`` back (``request_delta=-1``: and its request)."""
        with self._freed:
            now = self._clock()
            for name, limit in self._keys(key, tenant):
                self._cells[name] = settle(
                    self._cells.get(name, CellState()),
                    now,
                    limit,
                    token_delta=token_delta,
                    input_delta=input_delta,
                    output_delta=output_delta,
                    lease=lease,
                    request_delta=request_delta,
                )
            if lease is not None:
                self._freed.notify_all()

    def release(self, key: str, *, tenant: str | None = None, lease: str) -> None:
        """Give a concurrency lease back without settling tokens."""
        with self._freed:
            now = self._clock()
            for name, _limit in self._keys(key, tenant):
                state = self._cells.get(name)
                if state is not None:
                    self._cells[name] = release(state, now, lease)
            self._freed.notify_all()

    def in_flight(self, key: str, *, tenant: str | None = None) -> int:
        """Calls holding a concurrency lease on ``key`` now (the most of any of its limits)."""
        with self._lock:
            now = self._clock()
            return max(
                (
                    sum(
                        1
                        for until in self._cells.get(n, CellState()).leases.values()
                        if until > now
                    )
                    for n, _ in self._keys(key, tenant)
                ),
                default=0,
            )

    async def alearn(
        self,
        key: str,
        *,
        remaining_requests: float | None = None,
        remaining_tokens: float | None = None,
        remaining_input_tokens: float | None = None,
        remaining_output_tokens: float | None = None,
        pause: float | None = None,
    ) -> None:
        """Same as :meth:`learn` (no I/O)."""
        self.learn(
            key,
            remaining_requests=remaining_requests,
            remaining_tokens=remaining_tokens,
            remaining_input_tokens=remaining_input_tokens,
            remaining_output_tokens=remaining_output_tokens,
            pause=pause,
        )

    async def asettle(
        self,
        key: str,
        *,
        tenant: str | None = None,
        token_delta: float = 0.0,
        input_delta: float | None = None,
        output_delta: float | None = None,
        lease: str | None = None,
        request_delta: float = 0.0,
    ) -> None:
        """Same as :meth:`settle` (no I/O)."""
        self.settle(
            key,
            tenant=tenant,
            token_delta=token_delta,
            input_delta=input_delta,
            output_delta=output_delta,
            lease=lease,
            request_delta=request_delta,
        )

    async def arelease(self, key: str, *, tenant: str | None = None, lease: str) -> None:
        """Same as :meth:`release` (no I/O)."""
        self.release(key, tenant=tenant, lease=lease)


def _final(grant: Grant) -> Grant:
    """A refusal after the wait for a slot: no longer queued."""
    if grant.queued:
        return Grant(False, grant.retry_after, reason=grant.reason)
    return grant
