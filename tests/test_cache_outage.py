"""The response cache across a Redis outage: misses while Redis is away, and every entry
found again once it is back (its own redis-server, killed and restarted from its file)."""

from __future__ import annotations

import json
import time

import pytest
from redis_cluster import RedisServer

from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.store import RedisStore
from tests.conftest import RawRedis
from tests.test_cache import FAQ, PARAPHRASE, answer, ask

pytestmark = pytest.mark.redis


def _until_found(cache: ResponseCache, question: str) -> bool:
    """Ask for ``question``'s exact entry until Redis answers (its pause over, the pool's dead
    connections replaced): whether it was found within 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if cache.lookup(ask(question)) is not None:
            return True
        time.sleep(0.05)
    return False


def test_a_redis_outage_leaves_the_semantic_index_whole(redis_server: RedisServer) -> None:
    """A semantic lookup while Redis was away read each candidate as gone (a miss and a
    deleted entry looked the same) and dropped it from this process's index: once Redis was
    back, its entries were found by their exact key only, never again by similarity."""
    store = RedisStore(redis_server.url, key_prefix="outage", socket_timeout=0.25, retry_pause=0.2)
    cache = ResponseCache(store, sync_interval=0.0)
    try:
        assert cache.store(ask(FAQ), answer("a"))
        assert cache.lookup(ask(PARAPHRASE)) is not None
        redis_server.kill()
        assert cache.lookup(ask(PARAPHRASE)) is None  # away: a miss, not an error
        assert cache.lookup(ask(PARAPHRASE)) is None
        redis_server.start()  # from its append-only file: the entry is there
        assert _until_found(cache, FAQ)  # by its exact key (which leaves the index as it is)
        hit = cache.lookup(ask(PARAPHRASE))
        assert hit is not None
        assert (hit.kind, hit.response.text) == ("semantic", "a")
    finally:
        cache.close()


def test_an_answer_this_version_cannot_read_is_a_miss(redis_url: str, redis_prefix: str) -> None:
    """An entry whose answer another version wrote in a shape this one refuses (a
    ``cost_source`` it does not know) raised ``ValidationError`` out of every lookup, exact,
    semantic and stale: through a Guard, the call failed instead of asking the provider."""
    import redis

    cache = ResponseCache(redis_url, key_prefix=redis_prefix, sync_interval=0.0)
    try:
        assert cache.store(ask(FAQ), answer("a"))
        client: RawRedis = redis.Redis.from_url(redis_url)
        (key,) = client.keys(f"{redis_prefix}:cache:*:e:*")
        written = json.loads(client.get(key))
        written["response"]["cost_source"] = "from-a-newer-version"
        client.set(key, json.dumps(written), keepttl=True)
        client.close()
        assert cache.lookup(ask(FAQ)) is None
        assert cache.lookup(ask(PARAPHRASE)) is None
        assert cache.lookup_stale(ask(FAQ)) is None
        assert cache.store(ask(FAQ), answer("b"))  # written again in this version's shape
        hit = cache.lookup(ask(FAQ))
        assert hit is not None
        assert hit.response.text == "b"
    finally:
        cache.clear()
        cache.close()


def test_lookups_and_stores_that_redis_did_not_serve_are_counted(
    redis_server: RedisServer,
) -> None:
    """A Redis outage showed in ``stats`` only as misses (and a log line): a cache whose Redis
    was gone for an hour looked like one whose questions were all new. Each lookup and store
    that Redis did not serve is now counted in ``stats.errors`` too (a lookup while Redis is
    paused after a failure as well: it was not served either)."""
    store = RedisStore(redis_server.url, key_prefix="errors", socket_timeout=0.25, retry_pause=5)
    cache = ResponseCache(store, sync_interval=0.0)
    try:
        assert cache.store(ask(FAQ), answer("a"))
        assert cache.lookup(ask(FAQ)) is not None
        assert cache.stats.errors == 0
        redis_server.kill()
        assert cache.lookup(ask(FAQ)) is None  # tried: refused
        assert cache.lookup(ask(PARAPHRASE)) is None  # paused: not tried
        assert not cache.store(ask("Another question?"), answer("b"))
        assert cache.lookup_stale(ask(FAQ)) is None
        assert (cache.stats.errors, cache.stats.misses) == (4, 2)
    finally:
        cache.close()


def test_a_memory_cache_counts_no_errors() -> None:
    cache = ResponseCache()
    assert cache.store(ask(FAQ), answer("a"))
    assert cache.lookup(ask(FAQ)) is not None
    assert cache.lookup(ask("Something else entirely?")) is None
    assert cache.stats.errors == 0
