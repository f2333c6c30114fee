"""Eviction from a Redis response cache: a store evicts a bounded number of entries, so a
namespace holding far more entries than a cache's ``max_entries`` (lowered in a new
deployment, or a process configured with less sharing the namespace) shrinks over the next
stores instead of in one script over every entry beyond the bound."""

from __future__ import annotations

import pytest
import redis

from llmguard_sdk._state.steps import Batch
from llmguard_sdk._state.stores import RedisStore, hash_id
from llmguard_sdk.cache import RedisCacheBackend, ResponseCache
from llmguard_sdk.cache._redis import _EVICT_AT_ONCE
from tests.test_cache import answer, ask

pytestmark = pytest.mark.redis


def test_a_store_evicts_a_bounded_number_of_entries(redis_url: str, redis_prefix: str) -> None:
    """One store evicted every entry beyond ``max_entries`` in its script: a cache whose bound
    went from 100,000 to 1,000 held Redis for the deletes (and logs) of 99,000 entries in
    one call's store, and that call got 99,000 ids back to forget."""
    big = ResponseCache(redis_url, key_prefix=redis_prefix, semantic=False, max_entries=10_000)
    entries = [big.entry_for(ask(f"question {i}"), answer("a")) for i in range(500)]
    Batch([big.put_steps(e) for e in entries if e is not None]).run()
    big.close()
    oldest, newest = entries[0], entries[-1]
    assert oldest is not None
    assert newest is not None
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    small = RedisCacheBackend(store, "default", 100)
    client = redis.Redis.from_url(redis_url)
    keys = f"{redis_prefix}:cache:{{{hash_id('default')}}}"
    held = 500
    while held > 100:
        evicted = small.put(oldest.model_copy(update={"entry_id": f"new-{held}"}))
        assert evicted is not None
        assert len(evicted) == min(_EVICT_AT_ONCE, held + 1 - 100)
        held = held + 1 - len(evicted)
        assert client.zcard(f"{keys}:lru") == held
    assert not client.exists(f"{keys}:e:{oldest.entry_id}")  # least recently used: evicted
    assert client.exists(f"{keys}:e:{newest.entry_id}")
    client.close()
    store.close()
