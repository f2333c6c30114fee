"""Rate limits shared by every process through Redis: one Lua script per decision.

A reservation checks and debits the request and token budgets of a key together (all or
nothing) with Redis ``TIME`` as the clock; the key's hash lives under its own hash tag, so it
works on Redis Cluster. If Redis cannot be reached, each process falls back to its own
in-memory limiter for a few seconds and logs it once: calls go on, limited per process.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
from importlib import resources
from typing import Any

import redis

from ..store import Outage, RedisScripts, RedisStore, hash_id
from .memory import MemoryRateLimiter
from .policy import Grant, Priority, RateLimit

__all__ = ["RedisRateLimiter"]

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
        self._scripts = RedisScripts(store, _RESERVE, _SETTLE, _LEARN)
        self._fallback = MemoryRateLimiter(limits)
        self._outage = Outage("rate limits", "limiting per process")

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
        if self._outage.up():
            try:
                args = self._reserve_args(limit, requests, tokens, priority, max_wait)
                return _grant(self._scripts.sync(0)(keys=self._key(key), args=args))
            except redis.RedisError as exc:
                self._outage.failed(exc)
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
        if self._outage.up():
            try:
                args = self._learn_args(limit, remaining_requests, remaining_tokens, pause)
                self._scripts.sync(2)(keys=self._key(key), args=args)
                return
            except redis.RedisError as exc:
                self._outage.failed(exc)
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
        if self._outage.up():
            try:
                self._scripts.sync(1)(
                    keys=self._key(key), args=self._settle_args(limit, token_delta)
                )
                return
            except redis.RedisError as exc:
                self._outage.failed(exc)
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
        if self._outage.up():
            try:
                args = self._reserve_args(limit, requests, tokens, priority, max_wait)
                return _grant(await self._scripts.aio(0)(keys=self._key(key), args=args))
            except redis.RedisError as exc:
                self._outage.failed(exc)
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
        if self._outage.up():
            try:
                args = self._learn_args(limit, remaining_requests, remaining_tokens, pause)
                await self._scripts.aio(2)(keys=self._key(key), args=args)
                return
            except redis.RedisError as exc:
                self._outage.failed(exc)
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
        if self._outage.up():
            try:
                await self._scripts.aio(1)(
                    keys=self._key(key), args=self._settle_args(limit, token_delta)
                )
                return
            except redis.RedisError as exc:
                self._outage.failed(exc)
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
