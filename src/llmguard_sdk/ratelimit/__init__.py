"""Rate limits per route: requests and tokens per minute, reserve-then-settle (GCRA).

.. versionadded:: 0.1.0
"""

from typing import Protocol

from .memory import MemoryRateLimiter
from .policy import Grant, RateLimit, reserve, settle
from .redis import RedisRateLimiter

__all__ = [
    "Grant",
    "MemoryRateLimiter",
    "RateLimit",
    "RateLimiter",
    "RedisRateLimiter",
    "reserve",
    "settle",
]


class RateLimiter(Protocol):
    """What the Guard needs from a limiter (memory or Redis; the same contract)."""

    limits: dict[str, RateLimit]

    def reserve(self, key: str, *, requests: float = 1.0, tokens: float = 0.0) -> Grant:
        """Reserve a call on ``key``."""
        ...

    def settle(self, key: str, *, token_delta: float) -> None:
        """Correct a reservation."""
        ...

    async def areserve(self, key: str, *, requests: float = 1.0, tokens: float = 0.0) -> Grant:
        """Async twin of :meth:`reserve`."""
        ...

    async def asettle(self, key: str, *, token_delta: float) -> None:
        """Async twin of :meth:`settle`."""
        ...
