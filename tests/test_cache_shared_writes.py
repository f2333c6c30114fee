"""What the response cache says about its writes to a shared store that cannot be reached:
a ``store()`` that wrote nothing says so, and a ``clear()`` that cleared only this process's
part raises instead of returning as if the shared cache were empty (Redis "down" here is a
closed loopback port)."""

from __future__ import annotations

import anyio
import pytest
import with_redis
from redis_cluster import RedisServer

from llmguard_sdk._state.steps import Batch
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.errors import StoreUnavailableError
from llmguard_sdk.store import RedisStore
from tests.test_cache import FAQ, PARAPHRASE, answer, ask
from tests.test_cache_outage import _until_found

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


def test_a_clear_redis_did_not_take_raises() -> None:
    """``clear()`` while Redis was down returned as if the shared cache were empty (only
    this process's index was dropped; every process still served the old answers)."""
    cache = _unreachable()
    try:
        with pytest.raises(StoreUnavailableError, match="not cleared"):
            cache.clear()
        with pytest.raises(StoreUnavailableError):  # paused for other operations: still tried
            cache.clear()
    finally:
        cache.close()


def test_a_clear_that_failed_leaves_the_entries_found_once_redis_is_back(
    redis_server: RedisServer,
) -> None:
    """A clear that could not reach Redis deletes nothing in this process either: its
    semantic index still matches what Redis holds, so paraphrases are served when the
    outage ends (the clear is to be tried again), and a clear that reaches Redis clears.
    (Its own redis-server, killed and restarted from its append-only file.)"""
    store = RedisStore(redis_server.url, key_prefix="clear", socket_timeout=0.25, retry_pause=0.2)
    cache = ResponseCache(store, sync_interval=0.0)
    try:
        assert cache.store(ask(FAQ), answer("a"))
        redis_server.kill()
        with pytest.raises(StoreUnavailableError):
            cache.clear()
        redis_server.start()
        assert _until_found(cache, FAQ)
        hit = cache.lookup(ask(PARAPHRASE))
        assert hit is not None
        assert hit.kind == "semantic"
        cache.clear()
        assert cache.lookup(ask(FAQ)) is None
        assert cache.lookup(ask(PARAPHRASE)) is None
    finally:
        cache.close()


@pytest.mark.slow  # 60k entries written (about 20 s)
def test_a_large_shared_cache_is_cleared_in_short_scripts(
    redis_url: str, redis_prefix: str
) -> None:
    """``clear()`` deleted every entry in one script: 100k entries held Redis (every stage
    of every process) for half a second, past the default socket timeout, so the client gave
    up on a clear that went on, and the store paused all its stages as if Redis were down. It
    now deletes a page at a time (one short script each)."""
    store = RedisStore(redis_url, key_prefix=redis_prefix, socket_timeout=0.1)
    cache = ResponseCache(store, semantic=False, max_entries=100_000)
    try:
        entries = [cache.entry_for(ask(f"question {i}"), answer("a")) for i in range(60_000)]
        for at in range(0, len(entries), 5_000):
            Batch([cache.put_steps(e) for e in entries[at : at + 5_000] if e is not None]).run()
        assert cache.lookup(ask("question 59999")) is not None
        cache.clear()  # (one script timed out after 0.1 s: StoreUnavailableError)
        assert store.health.failures == 0
        assert cache.lookup(ask("question 59999")) is None
        client = store.client
        assert not list(client.scan_iter(match=f"{redis_prefix}:cache:*:e:*", count=1000))
    finally:
        cache.close()
