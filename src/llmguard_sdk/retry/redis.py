"""Retry budgets shared by every process through Redis: one Lua script per decision.

When Redis cannot be reached, the budget falls back to this process's own
:class:`~llmguard_sdk.retry.budget.MemoryRetryBudget` (so retries stay bounded) instead of
failing the call.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import weakref
from importlib import resources

import redis
import redis.asyncio
from redis.commands.core import AsyncScript

from ..store import RedisStore, hash_id
from .budget import MemoryRetryBudget, RetryBudgetPolicy

__all__ = ["RedisRetryBudget"]

logger = logging.getLogger("llmguard_sdk")
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

    def record_request(self, route: str) -> None:
        """Count one call sent to ``route``."""
        try:
            self._sync(keys=[self._key(route)], args=self._args("deposit"))
        except redis.RedisError as exc:
            logger.warning("retry budget: Redis unavailable (%s); counting locally", exc)
            self._fallback.record_request(route)

    def try_spend(self, route: str) -> bool:
        """Take one retry from ``route``'s shared budget."""
        try:
            return bool(self._sync(keys=[self._key(route)], args=self._args("spend")))
        except redis.RedisError as exc:
            logger.warning("retry budget: Redis unavailable (%s); deciding locally", exc)
            return self._fallback.try_spend(route)

    async def arecord_request(self, route: str) -> None:
        """Async twin of :meth:`record_request`."""
        try:
            await self._async()(keys=[self._key(route)], args=self._args("deposit"))
        except redis.RedisError as exc:
            logger.warning("retry budget: Redis unavailable (%s); counting locally", exc)
            self._fallback.record_request(route)

    async def atry_spend(self, route: str) -> bool:
        """Async twin of :meth:`try_spend`."""
        try:
            allowed = await self._async()(keys=[self._key(route)], args=self._args("spend"))
            return bool(allowed)
        except redis.RedisError as exc:
            logger.warning("retry budget: Redis unavailable (%s); deciding locally", exc)
            return self._fallback.try_spend(route)
