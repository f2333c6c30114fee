"""Rate limits per route, and optionally per tenant: requests, tokens (input plus output, and
input and output separately) per minute, reserve-then-settle (GCRA), and concurrency caps.

.. versionadded:: 0.1.0
"""

from typing import Protocol

from ._rules import LimitsConfig
from .memory import MemoryRateLimiter
from .policy import (
    CellState,
    Grant,
    Priority,
    RateLimit,
    learn,
    release,
    reserve,
    reserve_all,
    settle,
)
from .redis import RedisRateLimiter

__all__ = [
    "CellState",
    "Grant",
    "LimitsConfig",
    "MemoryRateLimiter",
    "Priority",
    "RateLimit",
    "RateLimiter",
    "RedisRateLimiter",
    "learn",
    "release",
    "reserve",
    "reserve_all",
    "settle",
]


class RateLimiter(Protocol):
    """What the Guard needs from a limiter (memory or Redis; the same contract)."""

    def rules(self, key: str) -> tuple[RateLimit, ...]:
        """The limits that apply on ``key`` (empty: none)."""
        ...

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
        """Reserve a call on ``key`` (and ``tenant``'s per-tenant limits), all or none."""
        ...

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
        """Bring the route-wide state down to what the provider reported."""
        ...

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
        """Correct a reservation, and give its concurrency lease back (``request_delta=-1``:
        and its request, for a call never sent)."""
        ...

    def release(self, key: str, *, tenant: str | None = None, lease: str) -> None:
        """Give a concurrency lease back without settling tokens."""
        ...

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
        """Async twin of :meth:`reserve`."""
        ...

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
        """Async twin of :meth:`learn`."""
        ...

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
        """Async twin of :meth:`settle`."""
        ...

    async def arelease(self, key: str, *, tenant: str | None = None, lease: str) -> None:
        """Async twin of :meth:`release`."""
        ...
