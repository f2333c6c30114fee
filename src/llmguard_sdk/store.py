"""Where shared state lives: in this process's memory, or in Redis.

Every Redis-backed stage (rate limits, breakers, budgets, caches, retry budgets) gets its
connection and its key names from here, so the key scheme has one home:

``{prefix}:{kind}:{{{tag}}}:{part}:{part}...``

``kind`` names the stage (``rl``, ``cb``, ``budget``, ...). ``tag`` is the Redis Cluster hash
tag: the keys of one atomic decision share it, so one Lua script can touch them all on one
slot. Tenant and user ids never appear in clear: :func:`hash_id` turns them into short,
stable digests.

Connections are opened lazily, with short socket timeouts, so a Redis that is down when the
application starts does not stop it from starting.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
import weakref
from typing import Any, Literal
from urllib.parse import urlsplit

import redis
import redis.asyncio
from redis.commands.core import AsyncScript, Script

from ._loops import PerLoop
from .errors import ConfigurationError

__all__ = ["MemoryStore", "Outage", "RedisScripts", "RedisStore", "Store", "hash_id", "open_store"]

logger = logging.getLogger("llmguard_sdk")
_SAFE_PART = re.compile(r"^[A-Za-z0-9_.-]+$")
_REDIS_SCHEMES = ("redis", "rediss", "unix")


def hash_id(value: str) -> str:
    """A short, stable digest of an id (tenant, user ...) for use inside keys."""
    return hashlib.blake2b(value.encode("utf-8"), digest_size=8).hexdigest()


class Store:
    """Base of the state stores; it owns the key scheme."""

    kind: Literal["memory", "redis"]

    def __init__(self, key_prefix: str = "llmguard") -> None:
        if not key_prefix or not _SAFE_PART.match(key_prefix.replace(":", "")):
            raise ConfigurationError(f"key_prefix {key_prefix!r} must be letters, digits, _.-:")
        self.key_prefix = key_prefix

    def key(self, kind: str, tag: str, *parts: str) -> str:
        """The key for stage ``kind``, hash tag ``tag`` and further ``parts``.

        ``tag`` and ``parts`` must be safe key text (letters, digits, ``_.-``); pass user
        supplied ids through :func:`hash_id` first.
        """
        for piece in (kind, tag, *parts):
            if not _SAFE_PART.match(piece):
                raise ValueError(f"unsafe key part {piece!r}: hash it with hash_id() first")
        return ":".join((self.key_prefix, kind, "{" + tag + "}", *parts))

    def close(self) -> None:
        """Release connections (nothing to do for memory)."""

    async def aclose(self) -> None:
        """Release async connections (nothing to do for memory)."""


class MemoryStore(Store):
    """State lives in this process only; the default."""

    kind: Literal["memory", "redis"] = "memory"

    def __repr__(self) -> str:
        return "MemoryStore()"


class RedisStore(Store):
    """State shared through Redis by every process that uses the same URL and prefix.

    Args:
        url: ``redis://[user:password@]host:port/db``, ``rediss://`` for TLS, or ``unix://``.
        key_prefix: prefix of every key the SDK writes.
        socket_timeout: seconds any single Redis operation may take (short by design: a slow
            Redis must not stall LLM calls).
    """

    kind: Literal["memory", "redis"] = "redis"

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "llmguard",
        socket_timeout: float = 0.5,
        max_connections: int = 50,
    ) -> None:
        super().__init__(key_prefix)
        if urlsplit(url).scheme not in _REDIS_SCHEMES:
            raise ConfigurationError(
                f"store must be 'memory' or a redis://, rediss:// or unix:// URL, got {url!r}"
            )
        if socket_timeout <= 0:
            raise ConfigurationError("socket_timeout must be positive")
        self.url = url
        self._options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_timeout,
            "max_connections": max_connections,
            "health_check_interval": 30,
        }
        try:
            self._pool = redis.ConnectionPool.from_url(url, **self._options)
        except ValueError as exc:
            raise ConfigurationError(f"bad Redis URL {url!r}: {exc}") from None
        self._lock = threading.Lock()
        self._client: redis.Redis | None = None
        self._aclients = PerLoop(self._new_async_client)

    def __repr__(self) -> str:
        return f"RedisStore(url={_redacted(self.url)!r}, key_prefix={self.key_prefix!r})"

    @property
    def client(self) -> redis.Redis:
        """The sync Redis client (connection pool shared by every stage)."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = redis.Redis(connection_pool=self._pool)
                client = self._client
        return client

    @property
    def aclient(self) -> redis.asyncio.Redis:
        """The async Redis client of the running event loop (one per loop)."""
        return self._aclients.get()

    def _new_async_client(self) -> redis.asyncio.Redis:
        return redis.asyncio.Redis.from_url(self.url, **self._options)

    def ping(self) -> bool:
        """True when Redis answers; False (never an exception) when it does not."""
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False

    def close(self) -> None:
        """Close the sync connection pool."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
        self._pool.disconnect()

    async def aclose(self) -> None:
        """Close the async client and the sync pool."""
        aclient = self._aclients.pop_current()
        if aclient is not None:
            await aclient.aclose()
        self.close()


class RedisScripts:
    """Lua scripts registered once on the sync client, and once per event loop's async client."""

    def __init__(self, store: RedisStore, *sources: str) -> None:
        self._store = store
        self._sources = sources
        self._sync = [store.client.register_script(source) for source in sources]
        self._async: weakref.WeakKeyDictionary[redis.asyncio.Redis, list[AsyncScript]] = (
            weakref.WeakKeyDictionary()
        )

    def sync(self, index: int) -> Script:
        """Script number ``index`` for the sync client."""
        return self._sync[index]

    def aio(self, index: int) -> AsyncScript:
        """Script number ``index`` for the running event loop's async client."""
        client = self._store.aclient
        scripts = self._async.get(client)
        if scripts is None:
            scripts = self._async[client] = [client.register_script(s) for s in self._sources]
        return scripts[index]


class Outage:
    """After a Redis failure, leave Redis alone for ``seconds`` (the caller decides locally),
    and say so once per outage: a dead or hung Redis costs one socket timeout per window, not
    one per call."""

    def __init__(self, what: str, instead: str, seconds: float = 5.0) -> None:
        self.what = what
        self.instead = instead
        self.seconds = seconds
        self._down_until = 0.0

    def up(self) -> bool:
        """Whether Redis may be tried now."""
        return time.monotonic() >= self._down_until

    def failed(self, exc: redis.RedisError) -> None:
        """Redis just failed: log (once per outage) and skip it for a while."""
        if self.up():
            logger.warning(
                "%s: Redis unavailable (%s); %s for %.0f s",
                self.what,
                exc,
                self.instead,
                self.seconds,
            )
        self._down_until = time.monotonic() + self.seconds


def open_store(spec: str | Store, *, key_prefix: str = "llmguard") -> Store:
    """A store from ``"memory"``, a Redis URL, or an existing :class:`Store`."""
    if isinstance(spec, Store):
        return spec
    if spec.strip().lower() == "memory":
        return MemoryStore(key_prefix)
    return RedisStore(spec.strip(), key_prefix=key_prefix)


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url
