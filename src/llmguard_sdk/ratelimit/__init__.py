"""Rate limits per route: requests and tokens per minute, reserve-then-settle (GCRA).

.. versionadded:: 0.1.0
"""

from typing import Protocol

from .memory import MemoryRateLimiter
from .policy import Grant, Priority, RateLimit, learn, reserve, settle
from .redis import RedisRateLimiter

__all__ = [
    "Grant",
    "MemoryRateLimiter",
    "Priority",
    "RateLimit",
    "RateLimiter",
    "RedisRateLimiter",
    "learn",
    "reserve",
    "settle",
]


class RateLimiter(Protocol):
    """What the Guard needs from a limiter (memory or Redis; the same contract)."""

    limits: dict[str, RateLimit]

    def reserve(
        self,
        key: str,
        *,
        requests: float = 1.0,
        tokens: float = 0.0,
        priority: Priority = "interactive",
        max_wait: float | None = None,
    ) -> Grant:
        """Reserve a call on ``key``."""
        ...

    def learn(
        self,
        key: str,
        *,
        remaining_requests: float | None = None,
        remaining_tokens: float | None = None,
        pause: float | None = None,
    ) -> None:
        """Bring the state down to what the provider reported."""
        ...

    def settle(self, key: str, *, token_delta: float) -> None:
        """Correct a reservation."""
        ...

    async def areserve(
        self,
        key: str,
        *,
        requests: float = 1.0,
        tokens: float = 0.0,
        priority: Priority = "interactive",
        max_wait: float | None = None,
    ) -> Grant:
        """Async twin of :meth:`reserve`."""
        ...

    async def alearn(
        self,
        key: str,
        *,
        remaining_requests: float | None = None,
        remaining_tokens: float | None = None,
        pause: float | None = None,
    ) -> None:
        """Async twin of :meth:`learn`."""
        ...

    async def asettle(self, key: str, *, token_delta: float) -> None:
        """Async twin of :meth:`settle`."""
        ...
