"""Where cache entries live: this process's memory, or Redis shared by every process.

Both backends keep entries with a time to live and evict the least recently used beyond
``max_entries``. The semantic index lives in each process's memory by default (a lookup
searches it without a network round trip); a backend reports the changes other processes
made through :meth:`changes`, which the Redis backend reads from a stream. With Redis 8 (or
any server with vector sets) the Redis backend can keep the vectors on the server instead:
one vector set per partition, searched with ``VSIM`` (:meth:`RedisCacheBackend.search`).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from typing import Protocol

from .._state.stores import RedisStore, Store
from ..errors import ConfigurationError
from ._changes import Change
from ._config import DEFAULT_MAX_BYTES
from ._memory import MemoryCacheBackend
from ._redis import RedisCacheBackend
from .entry import CacheEntry

__all__ = ["CacheBackend", "Change", "MemoryCacheBackend", "RedisCacheBackend", "open_backend"]


class CacheBackend(Protocol):
    """Storage of cache entries (see the module docs). A backend may also have
    ``peek(entry_id)``: :meth:`get` without marking the entry as used (both built-in ones
    do); the cache then reads the rival entries it only compares with it."""

    def get(self, entry_id: str) -> CacheEntry | None:
        """The live entry (not past ``stale_until``), marked as recently used; else None."""
        ...

    def put(self, entry: CacheEntry) -> list[str] | None:
        """Store ``entry``; returns the ids evicted to make room (``entry``'s own when it
        was not kept), or ``None`` when nothing was written (a shared store unreachable)."""
        ...

    def clear(self) -> None:
        """Delete every entry; :class:`~llmguard_sdk.errors.StoreUnavailableError` when a
        shared store could not be reached (nothing was deleted there)."""
        ...

    def delete(self, entry_id: str) -> bool:
        """Delete one entry (fresh or stale), for every process; whether it was held.
        :class:`~llmguard_sdk.errors.StoreUnavailableError` as for :meth:`clear`."""
        ...

    def changes(self) -> list[Change]:
        """Changes since the last call (made by any process); empty where none are shared."""
        ...


def open_backend(
    store: Store,
    namespace: str,
    max_entries: int,
    max_bytes: int | None,
    *,
    server: bool,
    semantic: bool = True,
    max_entry_bytes: int | None = None,
) -> tuple[CacheBackend, RedisCacheBackend | None]:
    """A cache's backend for ``store``, and the same backend again where it searches the
    vectors on the server (``server``: needs a Redis store; ``max_bytes``: a memory one,
    :data:`DEFAULT_MAX_BYTES` taken by either). Nothing is sent to Redis here: a Redis
    backend checks the server on its first read or write (see :class:`RedisCacheBackend`)."""
    if isinstance(store, RedisStore):
        if max_bytes is not None and max_bytes is not DEFAULT_MAX_BYTES:
            raise ConfigurationError(
                "max_bytes bounds an in-memory cache; bound a Redis cache with max_entries "
                "and the server's maxmemory"
            )
        backend = RedisCacheBackend(
            store, namespace, max_entries, vector_search=server, semantic=semantic,
            max_entry_bytes=max_entry_bytes,
        )  # fmt: skip
        return backend, backend if server else None
    if server:
        raise ConfigurationError("vector_search='server' needs a Redis store")
    return MemoryCacheBackend(max_entries, max_bytes, max_entry_bytes), None
