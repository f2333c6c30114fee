"""What the response cache says about its writes to a shared store that cannot be reached:
a ``store()`` that wrote nothing says so, and a ``clear()`` that cleared only this process's
part raises instead of returning as if the shared cache were empty (Redis "down" here is a
closed loopback port)."""

from __future__ import annotations

import anyio
import pytest
import with_redis

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.store import RedisStore
from tests.test_cache import FAQ, PARAPHRASE, answer, ask

pytestmark = pytest.mark.redis


def _unreachable(prefix: str = "down") -> ResponseCache:
    """A cache on a Redis that refuses every connection (nothing listens on the port)."""
    url = f"redis://127.0.0.1:{with_redis.free_port()}/0"
    store = RedisStore(url, key_prefix=prefix, socket_timeout=0.25, retry_pause=0.2)
    return ResponseCache(store, sync_interval=0.0)


def test_a_store_redis_did_not_take_returns_false() -> None:
    """``store()`` returned True while Redis was down (the answer reached no store), and
    counted it in ``stats.stores``: a caller could not tell a write from a dropped one."""
    cache = _unreachable()
    try:
        assert cache.store(ask(FAQ), answer("a")) is False  # the first attempt fails
        assert cache.store(ask(FAQ), answer("a")) is False  # paused: not even tried
        assert cache.stats.stores == 0
        assert cache.lookup(ask(PARAPHRASE)) is None  # nothing indexed as if it were there
    finally:
        cache.close()


def test_astore_redis_did_not_take_returns_false() -> None:
    """The async twin says the same."""

    async def main() -> bool:
        cache = _unreachable()
        try:
            return await cache.astore(ask(FAQ), answer("a"))
        finally:
            await cache.aclose()

    assert anyio.run(main) is False


def test_a_store_redis_took_returns_true(redis_url: str, redis_prefix: str) -> None:
    cache = ResponseCache(redis_url, key_prefix=redis_prefix, sync_interval=0.0)
    try:
        assert cache.store(ask(FAQ), answer("a")) is True
        assert cache.stats.stores == 1
    finally:
        cache.close()
