"""A namespace's vectors are kept one way: by ``vector_search="local"`` caches in the entries
and the change stream (each process's own index), by ``vector_search="server"`` caches in the
Redis server's vector sets. A cache of one kind switched onto a namespace the other kind
filled found none of its entries by similarity, silently (every semantic lookup a miss), and
the two kinds sharing a namespace were each blind to the other's entries. Now a semantic
cache over a namespace the other kind keeps raises ``ConfigurationError`` at its first lookup
or store (and at each after, until the namespace is free: construction sends nothing to
Redis), and a store from the other kind writes nothing (logged once); a clear frees the
namespace."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from llmguard_sdk._state.stores import RedisStore
from llmguard_sdk.cache import RedisCacheBackend, ResponseCache
from llmguard_sdk.errors import ConfigurationError
from tests.conftest import RawRedis
from tests.test_cache import FAQ, PARAPHRASE, answer, ask

OTHER = {"local": "server", "server": "local"}


@pytest.fixture
def server(redis8_url: str) -> Iterator[RawRedis]:
    client: RawRedis = redis.Redis.from_url(redis8_url)
    yield client
    client.close()


def _prefix() -> str:
    return f"kinds-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("first", ["server", "local"])
def test_switching_kinds_over_live_entries_is_a_configuration_error(
    redis8_url: str, first: str
) -> None:
    prefix, second = _prefix(), OTHER[first]
    old = ResponseCache(redis8_url, key_prefix=prefix, vector_search=first)  # type: ignore[arg-type]
    assert old.store(ask(FAQ), answer(f"by {first}"))
    switched = ResponseCache(redis8_url, key_prefix=prefix, vector_search=second)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError) as raised:
        switched.lookup(ask(FAQ))
    with pytest.raises(ConfigurationError):
        switched.store(ask(FAQ), answer(f"by {second}"))
    message = str(raised.value)
    assert f"vector_search='{first}'" in message
    assert f"vector_search='{second}'" in message
    assert "clear" in message
    assert "another namespace" in message
    # a cache without similarity search, or in another namespace, may use it
    exact = ResponseCache(redis8_url, key_prefix=prefix, vector_search=second, semantic=False)  # type: ignore[arg-type]
    assert exact.store(ask(FAQ), answer("exact only"))
    elsewhere = ResponseCache(
        redis8_url,
        key_prefix=prefix,
        namespace="elsewhere",
        vector_search=second,  # type: ignore[arg-type]
    )
    assert elsewhere.store(ask(FAQ), answer(f"by {second}"))
    # cleared, it is free for either kind
    old.clear()
    assert switched.store(ask(FAQ), answer(f"by {second}"))  # (its check passes now)
    hit = switched.lookup(ask(PARAPHRASE))
    assert hit is not None
    assert (hit.kind, hit.response.text) == ("semantic", f"by {second}")
    for cache in (old, exact, elsewhere, switched):
        cache.close()


def test_a_store_from_the_other_kind_writes_nothing_and_is_logged_once(
    redis8_url: str, server: RawRedis, caplog: pytest.LogCaptureFixture
) -> None:
    """Two kinds started on an empty namespace (each used once: its checks passed): the
    first to store a vector keeps it."""
    prefix = _prefix()
    local = ResponseCache(redis8_url, key_prefix=prefix, vector_search="local")
    remote = ResponseCache(redis8_url, key_prefix=prefix, vector_search="server")
    try:
        assert local.lookup(ask(FAQ)) is None
        assert remote.lookup(ask(FAQ)) is None
        assert remote.store(ask(FAQ), answer("by server"))
        entries = set(server.scan_iter(match=f"{prefix}:cache:*:e:*"))
        assert not local.store(ask("How do I delete my account?"), answer("by local"))
        assert not local.store(ask("How do I close my account?"), answer("by local"))
        assert set(server.scan_iter(match=f"{prefix}:cache:*:e:*")) == entries  # nothing written
        refusals = [r for r in caplog.records if "vector_search='server'" in r.getMessage()]
        assert len(refusals) == 1
        assert refusals[0].levelname == "ERROR"
        assert isinstance(local.state, RedisStore)
        assert local.state.health.failures == 0  # refused: no outage to wait out
        hit = local.lookup(ask(FAQ))  # exact reads still serve the other kind's entries
        assert hit is not None
        assert hit.response.text == "by server"
        assert local.store(ask(FAQ), answer("x"), cacheable=False) is False
    finally:
        local.close()
        remote.close()


@pytest.mark.parametrize("first", ["server", "local"])
def test_a_namespace_written_before_the_mark_is_read_from_its_keys(
    redis8_url: str, server: RawRedis, first: str
) -> None:
    """Entries an earlier version wrote carry no mark: the ``vix`` hash says "server", an
    entry holding its vector "local"."""
    prefix = _prefix()
    old = ResponseCache(redis8_url, key_prefix=prefix, vector_search=first)  # type: ignore[arg-type]
    assert old.store(ask(FAQ), answer("a"))
    (mark,) = server.scan_iter(match=f"{prefix}:cache:*:vectors")
    assert server.get(mark) == first.encode()
    assert server.pttl(mark) > 0
    server.delete(mark)
    other = ResponseCache(redis8_url, key_prefix=prefix, vector_search=OTHER[first])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        other.lookup(ask(FAQ))
    other.close()
    same = ResponseCache(redis8_url, key_prefix=prefix, vector_search=first)  # type: ignore[arg-type]
    assert same.store(ask("How do I delete my account?"), answer("b"))
    same.clear()
    assert list(server.scan_iter(match=f"{prefix}:cache:*:vectors")) == []
    for cache in (old, same):
        cache.close()


def test_local_caches_mark_their_namespace_on_any_redis(redis_url: str, redis_prefix: str) -> None:
    """(On a Redis without vector sets too: the mark is a plain string that expires.)"""
    cache = ResponseCache(redis_url, key_prefix=redis_prefix)
    try:
        assert cache.store(ask(FAQ), answer("a"))
        client = cache.state.client  # type: ignore[attr-defined]
        (mark,) = client.scan_iter(match=f"{redis_prefix}:cache:*:vectors")
        assert client.get(mark) == b"local"
        assert client.pttl(mark) > 0
        again = ResponseCache(redis_url, key_prefix=redis_prefix)  # the same kind: welcome
        hit = again.lookup(ask(PARAPHRASE))
        assert hit is not None
        again.close()
    finally:
        cache.clear()
        cache.close()


def _vectors(server: RawRedis, prefix: str) -> int:
    """How many vectors the vector sets under ``prefix`` hold."""
    keys = server.scan_iter(match=f"{prefix}:cache:*:v:*")
    return sum(int(server.execute_command("VCARD", key)) for key in keys)


def _indexed(server: RawRedis, prefix: str) -> int:
    """How many entry ids the ``vix`` hashes under ``prefix`` name."""
    return sum(int(server.hlen(key)) for key in server.scan_iter(match=f"{prefix}:cache:*:vix"))


def test_an_exact_only_writer_evicting_server_entries_removes_their_vectors(
    redis8_url: str, server: RawRedis
) -> None:
    """A cache without similarity search (``semantic=False``) may share a namespace that
    ``vector_search="server"`` caches keep; its stores evicted their entries but left the
    vectors in the vector sets (and the ids in the ``vix`` hash), for good."""
    prefix = _prefix()
    remote = ResponseCache(redis8_url, key_prefix=prefix, vector_search="server", max_entries=2)
    exact = ResponseCache(redis8_url, key_prefix=prefix, semantic=False, max_entries=2)
    try:
        assert remote.store(ask(FAQ), answer("a"))
        assert remote.store(ask("How do I delete my account?"), answer("b"))
        assert (_vectors(server, prefix), _indexed(server, prefix)) == (2, 2)
        assert exact.store(ask("What is the capital of France?"), answer("Paris"))
        assert (_vectors(server, prefix), _indexed(server, prefix)) == (1, 1)
        assert exact.store(ask("What is the capital of Italy?"), answer("Rome"))
        assert (_vectors(server, prefix), _indexed(server, prefix)) == (0, 0)
        assert remote.lookup(ask(PARAPHRASE)) is None
    finally:
        remote.close()
        exact.close()


def test_an_exact_only_reader_of_an_expired_server_entry_removes_its_vector(
    redis8_url: str, server: RawRedis
) -> None:
    """The read of an expired entry's key takes it out of the LRU (no eviction will pop it):
    its vector goes then too, whichever cache reads it (the vector set lives on with a
    longer-lived entry's vector)."""
    prefix = _prefix()
    remote = ResponseCache(
        redis8_url, key_prefix=prefix, vector_search="server", ttl=1.0, stale_ttl=0.0
    )
    lasting = ResponseCache(redis8_url, key_prefix=prefix, vector_search="server", ttl=60)
    store = RedisStore(redis8_url, key_prefix=prefix)
    exact = RedisCacheBackend(store, "default", 10)  # (vector_search=False)
    try:
        assert remote.store(ask(FAQ), answer("short-lived"))
        stored = time.monotonic()
        assert lasting.store(ask("How do I delete my account?"), answer("lasting"))
        assert (_vectors(server, prefix), _indexed(server, prefix)) == (2, 2)
        time.sleep(max(0.0, stored + 1.1 - time.monotonic()))
        assert exact.get(remote.keys(ask(FAQ)).exact) is None  # the exact read, no search
        assert (_vectors(server, prefix), _indexed(server, prefix)) == (1, 1)
    finally:
        remote.close()
        lasting.close()
        store.close()
