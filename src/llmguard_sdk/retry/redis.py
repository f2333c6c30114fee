"""Retry budgets shared by every process through Redis: one Lua script per decision.

When Redis cannot be reached, the budget falls back to this process's own
:class:`~llmguard_sdk.retry.budget.MemoryRetryBudget` (so retries stay bounded) instead of
failing the call, and leaves Redis alone for a few seconds, so a dead or hung Redis costs one
socket timeout per outage window, not one per call.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import time
import weakref
from importlib import resources

import redis
import redis.asyncio
from redis.commands.core import AsyncScript

from ..store import RedisStore, hash_id
from .budget import MemoryRetryBudget, RetryBudgetPolicy

__all__ = ["RedisRetryBudget"]

logger = logging.getLogger("llmguard_sdk")
_DOWN_SECONDS = 5.0
_SCRIPT = resources.files(__package__).joinpath("lua/budget.lua").read_text(encoding="utf-8")


class RedisRetryBudget:
    """A :class:`~llmguard_sdk.retry.budget.RetryBudget` whose counts live in Redis.

    Keys: ``{prefix}:rb:{<route hash>}``, one small hash per route, expiring after ten windows
    without traffic. Redis ``TIME`` is the clock, so hosts with skewed clocks agree.
    """

    def __init__(self, store: RedisStore, policy: RetryBudgetPolicy | None = None) -> None:
        self.policy = policy or RetryBudgetPolicy()
        self._store = store
        self._sync = store.client.register_script(_SCRIPT)
        self._async_scripts: weakref.WeakKeyDictionary[redis.asyncio.Redis, AsyncScript] = (
            weakref.WeakKeyDictionary()
        )
        self._fallback = MemoryRetryBudget(self.policy)
        self._ttl = max(1, int(self.policy.window * 10))
        self._down_until = 0.0

    def _async(self) -> AsyncScript:
        client = self._store.aclient
        script = self._async_scripts.get(client)
        if script is None:
            script = self._async_scripts[client] = client.register_script(_SCRIPT)
        return script

    def _key(self, route: str) -> str:
        return self._store.key("rb", hash_id(route))

    def _args(self, op: str) -> list[str | float | int]:
        p = self.policy
        return [op, p.ratio, p.min_per_second, p.window, self._ttl]

    def _redis_up(self) -> bool:
        return time.monotonic() >= self._down_until

    def _went_down(self, exc: redis.RedisError) -> None:
        if self._redis_up():
            logger.warning(
                "retry budget: Redis unavailable (%s); deciding locally for %.0f s",
                exc,
                _DOWN_SECONDS,
            )
        self._down_until = time.monotonic() + _DOWN_SECONDS

    def record_request(self, route: str) -> None:
        """Count one call sent to ``route``."""
        if self._redis_up():
            try:
                self._sync(keys=[self._key(route)], args=self._args("deposit"))
                return
            except redis.RedisError as exc:
                self._went_down(exc)
        self._fallback.record_request(route)

    def try_spend(self, route: str) -> bool:
        """Take one retry from ``route``'s shared budget."""
        if self._redis_up():
            try:
                return bool(self._sync(keys=[self._key(route)], args=self._args("spend")))
            except redis.RedisError as exc:
                self._went_down(exc)
        return self._fallback.try_spend(route)

    async def arecord_request(self, route: str) -> None:
        """Async twin of :meth:`record_request`."""
        if self._redis_up():
            try:
                await self._async()(keys=[self._key(route)], args=self._args("deposit"))
                return
            except redis.RedisError as exc:
                self._went_down(exc)
        self._fallback.record_request(route)

    async def atry_spend(self, route: str) -> bool:
        """Async twin of :meth:`try_spend`."""
        if self._redis_up():
            try:
                allowed = await self._async()(keys=[self._key(route)], args=self._args("spend"))
                return bool(allowed)
            except redis.RedisError as exc:
                self._went_down(exc)
        return self._fallback.try_spend(route)
