"""Rate limits of this process: one (request TAT, token TAT) pair per key, behind a lock.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .policy import Grant, Priority, RateLimit, learn, reserve, settle

__all__ = ["MemoryRateLimiter"]


class MemoryRateLimiter:
    """Reserve-then-settle limits for any number of keys; ``clock`` is injectable for tests.

    ::

        limiter = MemoryRateLimiter({"openai": RateLimit(rpm=500, tpm=200_000)})
        grant = limiter.reserve("openai", tokens=1_200)
        if grant.allowed:
            ...  # call, then:
            limiter.settle("openai", token_delta=actual_tokens - 1_200)
    """

    def __init__(
        self, limits: dict[str, RateLimit], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = dict(limits)
        self._clock = clock
        self._lock = threading.Lock()
        self._tats: dict[str, tuple[float, float]] = {}

    def reserve(
        self,
        key: str,
        *,
        requests: float = 1.0,
        tokens: float = 0.0,
        priority: Priority = "interactive",
        max_wait: float | None = None,
    ) -> Grant:
        """Reserve a call on ``key`` (keys without a limit always pass); see
        :func:`~llmguard_sdk.ratelimit.reserve` for waiting and priorities."""
        limit = self.limits.get(key)
        if limit is None:
            return Grant(True)
        with self._lock:
            grant, self._tats[key] = reserve(
                self._tats.get(key, (0.0, 0.0)),
                self._clock(),
                limit,
                requests=requests,
                tokens=tokens,
                priority=priority,
                max_wait=max_wait,
            )
            return grant

    def learn(
        self,
        key: str,
        *,
        remaining_requests: float | None = None,
        remaining_tokens: float | None = None,
        pause: float | None = None,
    ) -> None:
        """Bring ``key``'s state down to what the provider reported."""
        limit = self.limits.get(key)
        if limit is None:
            return
        with self._lock:
            self._tats[key] = learn(
                self._tats.get(key, (0.0, 0.0)),
                self._clock(),
                limit,
                remaining_requests=remaining_requests,
                remaining_tokens=remaining_tokens,
                pause=pause,
            )

    def settle(self, key: str, *, token_delta: float) -> None:
        """Correct ``key``'s reservation to what the call really used."""
        limit = self.limits.get(key)
        if limit is None:
            return
        with self._lock:
            self._tats[key] = settle(
                self._tats.get(key, (0.0, 0.0)), self._clock(), limit, token_delta=token_delta
            )

    async def areserve(
        self,
        key: str,
        *,
        requests: float = 1.0,
        tokens: float = 0.0,
        priority: Priority = "interactive",
        max_wait: float | None = None,
    ) -> Grant:
        """Same as :meth:`reserve` (no I/O)."""
        return self.reserve(
            key, requests=requests, tokens=tokens, priority=priority, max_wait=max_wait
        )

    async def alearn(
        self,
        key: str,
        *,
        remaining_requests: float | None = None,
        remaining_tokens: float | None = None,
        pause: float | None = None,
    ) -> None:
        """Same as :meth:`learn` (no I/O)."""
        self.learn(
            key,
            remaining_requests=remaining_requests,
            remaining_tokens=remaining_tokens,
            pause=pause,
        )

    async def asettle(self, key: str, *, token_delta: float) -> None:
        """Same as :meth:`settle` (no I/O)."""
        self.settle(key, token_delta=token_delta)
