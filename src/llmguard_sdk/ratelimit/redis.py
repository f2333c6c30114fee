"""Rate limits shared by every process through Redis: one Lua script per decision.

A reservation checks and debits the request and token budgets of a key together (all or
nothing) with Redis ``TIME`` as the clock; the key's hash lives under its own hash tag, so it
works on Redis Cluster. If Redis cannot be reached, each process falls back to its own
in-memory limiter for a few seconds and logs it once: calls go on, limited per process.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import math
import time
import weakref
from importlib import resources
from typing import Any

import redis
import redis.asyncio
from redis.commands.core import AsyncScript

from ..store import RedisStore, hash_id
from .memory import MemoryRateLimiter
from .policy import Grant, Priority, RateLimit

__all__ = ["RedisRateLimiter"]

logger = logging.getLogger("llmguard_sdk")
_DOWN_SECONDS = 5.0
_LUA = resources.files(__package__).joinpath("lua")
_RESERVE = _LUA.joinpath("reserve.lua").read_text(encoding="utf-8")
_SETTLE = _LUA.joinpath("settle.lua").read_text(encoding="utf-8")
_LEARN = _LUA.joinpath("learn.lua").read_text(encoding="utf-8")


class RedisRateLimiter:
    """:class:`~llmguard_sdk.ratelimit.MemoryRateLimiter`'s contract, shared through Redis.

    Keys: ``{prefix}:rl:{<key hash>}``. ``clock_offset`` shifts the scripts' clock for tests.
    """

    def __init__(self, store: RedisStore, limits: dict[str, RateLimit]) -> None:
        self.limits = dict(limits)
        self.clock_offset = 0.0
        self._store = store
        self._reserve = store.client.register_script(_RESERVE)
        self._settle = store.client.register_script(_SETTLE)
        self._learn = store.client.register_script(_LEARN)
        self._async: weakref.WeakKeyDictionary[
            redis.asyncio.Redis, tuple[AsyncScript, AsyncScript, AsyncScript]
        ] = weakref.WeakKeyDictionary()
        self._fallback = MemoryRateLimiter(limits)
        self._down_until = 0.0

    def _key(self, key: str) -> list[str]:
        return [self._store.key("rl", hash_id(key))]

    def _reserve_args(
        self,
        limit: RateLimit,
        requests: float,
        tokens: float,
        priority: Priority,
        max_wait: float | None,
    ) -> list[Any]:
        share = 1.0 - (limit.batch_headroom if priority == "batch" else 0.0)
        patience = limit.max_wait if max_wait is None else max(0.0, min(max_wait, limit.max_wait))
        return [
            "" if limit.rpm is None else limit.rpm,
            "" if limit.tpm is None else limit.tpm,
            limit.period,
            requests,
            tokens,
            self.clock_offset,
            share,
            patience,
        ]

    def _learn_args(
        self,
        limit: RateLimit,
        remaining_requests: float | None,
        remaining_tokens: float | None,
        pause: float | None,
    ) -> list[Any]:
        return [
            "" if limit.rpm is None else limit.rpm,
            "" if limit.tpm is None else limit.tpm,
            limit.period,
            "" if remaining_requests is None else remaining_requests,
            "" if remaining_tokens is None else remaining_tokens,
            "" if pause is None else pause,
            self.clock_offset,
        ]

    def _settle_args(self, limit: RateLimit, delta: float) -> list[Any]:
        return [limit.tpm, limit.period, delta, self.clock_offset]

    def _scripts(self) -> tuple[AsyncScript, AsyncScript, AsyncScript]:
        client = self._store.aclient
        scripts = self._async.get(client)
        if scripts is None:
            scripts = (
                client.register_script(_RESERVE),
                client.register_script(_SETTLE),
                client.register_script(_LEARN),
            )
            self._async[client] = scripts
        return scripts

    def _up(self) -> bool:
        return time.monotonic() >= self._down_until

    def _went_down(self, exc: redis.RedisError) -> None:
        if self._up():
            logger.warning(
                "rate limits: Redis unavailable (%s); limiting per process for %.0f s",
                exc,
                _DOWN_SECONDS,
            )
        self._down_until = time.monotonic() + _DOWN_SECONDS

    def reserve(
        self,
        key: str,
        *,
        requests: float = 1.0,
        tokens: float = 0.0,
        priority: Priority = "interactive",
        max_wait: float | None = None,
    ) -> Grant:
        """Reserve a call on ``key`` in Redis (keys without a limit always pass)."""
        limit = self.limits.get(key)
        if limit is None:
            return Grant(True)
        if self._up():
            try:
                args = self._reserve_args(limit, requests, tokens, priority, max_wait)
                return _grant(self._reserve(keys=self._key(key), args=args))
            except redis.RedisError as exc:
                self._went_down(exc)
        return self._fallback.reserve(
            key, requests=requests, tokens=tokens, priority=priority, max_wait=max_wait
        )

    def learn(
        self,
        key: str,
        *,
        remaining_requests: float | None = None,
        remaining_tokens: float | None = None,
        pause: float | None = None,
    ) -> None:
        """Bring ``key``'s shared state down to what the provider reported."""
        limit = self.limits.get(key)
        if limit is None:
            return
        if self._up():
            try:
                args = self._learn_args(limit, remaining_requests, remaining_tokens, pause)
                self._learn(keys=self._key(key), args=args)
                return
            except redis.RedisError as exc:
                self._went_down(exc)
        self._fallback.learn(
            key,
            remaining_requests=remaining_requests,
            remaining_tokens=remaining_tokens,
            pause=pause,
        )

    def settle(self, key: str, *, token_delta: float) -> None:
        """Correct ``key``'s reservation in Redis."""
        limit = self.limits.get(key)
        if limit is None or limit.tpm is None or token_delta == 0:
            return
        if self._up():
            try:
                self._settle(keys=self._key(key), args=self._settle_args(limit, token_delta))
                return
            except redis.RedisError as exc:
                self._went_down(exc)
        self._fallback.settle(key, token_delta=token_delta)

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
        limit = self.limits.get(key)
        if limit is None:
            return Grant(True)
        if self._up():
            try:
                args = self._reserve_args(limit, requests, tokens, priority, max_wait)
                return _grant(await self._scripts()[0](keys=self._key(key), args=args))
            except redis.RedisError as exc:
                self._went_down(exc)
        return self._fallback.reserve(
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
        """Async twin of :meth:`learn`."""
        limit = self.limits.get(key)
        if limit is None:
            return
        if self._up():
            try:
                args = self._learn_args(limit, remaining_requests, remaining_tokens, pause)
                await self._scripts()[2](keys=self._key(key), args=args)
                return
            except redis.RedisError as exc:
                self._went_down(exc)
        self._fallback.learn(
            key,
            remaining_requests=remaining_requests,
            remaining_tokens=remaining_tokens,
            pause=pause,
        )

    async def asettle(self, key: str, *, token_delta: float) -> None:
        """Async twin of :meth:`settle`."""
        limit = self.limits.get(key)
        if limit is None or limit.tpm is None or token_delta == 0:
            return
        if self._up():
            try:
                await self._scripts()[1](
                    keys=self._key(key), args=self._settle_args(limit, token_delta)
                )
                return
            except redis.RedisError as exc:
                self._went_down(exc)
        self._fallback.settle(key, token_delta=token_delta)


def _grant(reply: Any) -> Grant:
    allowed, retry_after, wait = (
        part.decode() if isinstance(part, bytes) else str(part) for part in reply
    )
    return Grant(
        bool(int(allowed)),
        math.inf if retry_after == "inf" else float(retry_after),
        wait=float(wait),
    )
