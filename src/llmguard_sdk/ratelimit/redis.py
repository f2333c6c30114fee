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
from .policy import Grant, RateLimit

__all__ = ["RedisRateLimiter"]

logger = logging.getLogger("llmguard_sdk")
_DOWN_SECONDS = 5.0
_LUA = resources.files(__package__).joinpath("lua")
_RESERVE = _LUA.joinpath("reserve.lua").read_text(encoding="utf-8")
_SETTLE = _LUA.joinpath("settle.lua").read_text(encoding="utf-8")


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
        self._async: weakref.WeakKeyDictionary[
            redis.asyncio.Redis, tuple[AsyncScript, AsyncScript]
        ] = weakref.WeakKeyDictionary()
        self._fallback = MemoryRateLimiter(limits)
        self._down_until = 0.0

    def _key(self, key: str) -> list[str]:
        return [self._store.key("rl", hash_id(key))]

    def _reserve_args(self, limit: RateLimit, requests: float, tokens: float) -> list[Any]:
        return [
            "" if limit.rpm is None else limit.rpm,
            "" if limit.tpm is None else limit.tpm,
            limit.period,
            requests,
            tokens,
            self.clock_offset,
        ]

    def _settle_args(self, limit: RateLimit, delta: float) -> list[Any]:
        return [limit.tpm, limit.period, delta, self.clock_offset]

    def _scripts(self) -> tuple[AsyncScript, AsyncScript]:
        client = self._store.aclient
        scripts = self._async.get(client)
        if scripts is None:
            scripts = (client.register_script(_RESERVE), client.register_script(_SETTLE))
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

    def reserve(self, key: str, *, requests: float = 1.0, tokens: float = 0.0) -> Grant:
        """Reserve a call on ``key`` in Redis (keys without a limit always pass)."""
        limit = self.limits.get(key)
        if limit is None:
            return Grant(True)
        if self._up():
            try:
                reply = self._reserve(
                    keys=self._key(key), args=self._reserve_args(limit, requests, tokens)
                )
                return _grant(reply)
            except redis.RedisError as exc:
                self._went_down(exc)
        return self._fallback.reserve(key, requests=requests, tokens=tokens)

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

    async def areserve(self, key: str, *, requests: float = 1.0, tokens: float = 0.0) -> Grant:
        """Async twin of :meth:`reserve`."""
        limit = self.limits.get(key)
        if limit is None:
            return Grant(True)
        if self._up():
            try:
                reply = await self._scripts()[0](
                    keys=self._key(key), args=self._reserve_args(limit, requests, tokens)
                )
                return _grant(reply)
            except redis.RedisError as exc:
                self._went_down(exc)
        return self._fallback.reserve(key, requests=requests, tokens=tokens)

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
    allowed, retry_after = reply
    text = retry_after.decode() if isinstance(retry_after, bytes) else str(retry_after)
    return Grant(bool(int(allowed)), math.inf if text == "inf" else float(text))
