"""``clear()`` of a cache with server-side vector search (Redis 8 vector sets) in bounded steps.

The entries went a page a script, but the last script read the whole ``vix`` hash (entry id
-> partition) and deleted every vector set it named: about 0.4 s at 100k entries, past a
socket timeout, with Redis answering nobody meanwhile. The hash is now read a page of fields
a script (``HSCAN``), and a script frees a bounded number of vectors (a set larger than that
alone). The pages are made small here, and the scripts' commands read with ``MONITOR``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from llmguard_sdk.cache import HashingEmbedder, ResponseCache, _redis
from llmguard_sdk.context import scoped
from tests.conftest import RawRedis
from tests.test_cache_server_search import answer, ask

PAGE = 40  # entries (or hash fields) a clear deletes per script, here
VECTORS = 100  # vectors a clear frees per script at most, here (but one larger set)
TENANTS = 30  # partitions of 5 entries each, beside one of 150
BIG = 150


@pytest.fixture
def server(redis8_url: str) -> Iterator[RawRedis]:
    client: RawRedis = redis.Redis.from_url(redis8_url)
    yield client
    client.close()


def _filled(url: str, prefix: str) -> ResponseCache:
    """A server-search cache of 300 entries: one partition of 150, 30 tenants of 5."""
    cache = ResponseCache(
        url,
        key_prefix=prefix,
        vector_search="server",
        embedder=HashingEmbedder(dimension=64),
        max_entries=1000,
    )
    for i in range(BIG):
        assert cache.store(ask(f"What is the opening time of shop number {i}?"), answer("9"))
    for tenant in range(TENANTS):
        with scoped(tenant=f"tenant-{tenant}"):
            for i in range(5):
                assert cache.store(ask(f"How do I return item {i}?"), answer("by mail"))
    return cache


def _scripts_run(client: RawRedis, url: str, act: Callable[[], None]) -> list[list[list[str]]]:
    """The commands each script ran while ``act()`` ran (read with MONITOR)."""
    watcher: RawRedis = redis.Redis.from_url(url, socket_timeout=30)
    end = f"scripts-end-{uuid.uuid4().hex}"
    scripts: list[list[list[str]]] = []
    try:
        with watcher.monitor() as monitor:
            act()
            client.echo(end)
            while True:
                found = monitor.next_command()
                command = found["command"].split(" ")
                if end in command:
                    return scripts
                if command[0].upper() in ("EVALSHA", "EVAL"):
                    scripts.append([])
                elif found["client_type"] == "lua" and scripts:
                    scripts[-1].append(command)
    finally:
        watcher.close()


def _sizes(client: RawRedis, prefix: str) -> dict[str, int]:
    return {
        key.decode(): int(client.execute_command("VCARD", key))
        for key in client.scan_iter(match=f"{prefix}:cache:*:v:*")
    }


@pytest.fixture(params=["listpack", "hashtable"])
def encoding(request: pytest.FixtureRequest, server: RawRedis) -> Iterator[str]:
    """The hashes' encoding: a small one is a listpack (HSCAN reads it whole), a larger one
    a hash table (HSCAN reads it from a cursor), here from 17 fields on."""
    (name, was), *_ = server.config_get("hash-max-listpack-entries").items()
    if request.param == "hashtable":
        server.config_set(name, 16)
    yield request.param
    server.config_set(name, was)


def test_a_namespace_larger_than_a_page_is_cleared_in_bounded_scripts(
    redis8_url: str, server: RawRedis, monkeypatch: pytest.MonkeyPatch, encoding: str
) -> None:
    monkeypatch.setattr(_redis, "_CLEAR_PAGE", PAGE)
    monkeypatch.setattr(_redis, "_CLEAR_VECTORS", VECTORS)
    prefix = f"clear-{uuid.uuid4().hex[:8]}"
    cache = _filled(redis8_url, prefix)
    try:
        (index,) = server.scan_iter(match=f"{prefix}:cache:*:vix")
        assert server.object("encoding", index).decode() == encoding
        sizes = _sizes(server, prefix)
        assert sorted(sizes.values()) == [5] * TENANTS + [BIG]
        assert server.hlen(index) == 300

        scripts = _scripts_run(server, redis8_url, cache.clear)

        assert len(scripts) > 300 // PAGE  # in steps
        freed_by_now: set[str] = set()
        for commands in scripts:
            reads = [c for c in commands if c[0].upper() in ("HVALS", "HGETALL", "HKEYS")]
            assert not reads, "a script read the whole hash"
            fields = sum(len(c) - 2 for c in commands if c[0].upper() == "HDEL")
            entries = [c for c in commands if c[0].upper() == "DEL" and ":e:" in c[1]]
            assert fields <= PAGE
            assert len(entries) <= PAGE
            freed = {c[1] for c in commands if c[0].upper() == "DEL" and c[1] in sizes}
            vectors = sum(sizes[key] for key in freed)
            assert vectors <= VECTORS or len(freed) == 1, vectors
            freed_by_now |= freed
        assert freed_by_now == set(sizes)

        _assert_nothing_left_but_the_log(server, prefix)
        assert cache.lookup(ask("What is the opening time of shop number 7?")) is None
        # the namespace works on
        assert cache.store(ask("What is the opening time of shop number 7?"), answer("10"))
        hit = cache.lookup(ask("what's the opening time of shop number 7"))
        assert hit is not None
        assert hit.response.text == "10"
    finally:
        cache.clear()
        cache.close()


def _assert_nothing_left_but_the_log(client: RawRedis, prefix: str) -> None:
    """No entry, vector set, hash or LRU is left, and every key left expires."""
    left = [key.decode() for key in client.scan_iter(match=f"{prefix}:*")]
    assert [key.rsplit(":", 1)[-1] for key in left] == ["log"], left
    assert all(client.pttl(key) > 0 for key in left)  # (-1: no expiry)


def test_a_clear_with_writes_meanwhile_leaves_nothing_without_an_expiry(
    redis8_url: str, server: RawRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store between two of a clear's scripts: its entry and vector go too, or stay
    whole (entry, vector and hash field, each with its expiry)."""
    monkeypatch.setattr(_redis, "_CLEAR_PAGE", PAGE)
    monkeypatch.setattr(_redis, "_CLEAR_VECTORS", VECTORS)
    prefix = f"clear-{uuid.uuid4().hex[:8]}"
    cache = _filled(redis8_url, prefix)
    backend: Any = cache._backend
    try:
        for step, _ in enumerate(backend._clear_steps()):
            with scoped(tenant=f"late-{step % 3}"):
                cache.store(ask(f"Is parcel {step} on its way?"), answer("yes"))
        for key in server.scan_iter(match=f"{prefix}:*"):
            assert server.pttl(key) > 0, key
        entries = list(server.scan_iter(match=f"{prefix}:cache:*:e:*"))
        assert sum(_sizes(server, prefix).values()) == len(entries)
        indexes = list(server.scan_iter(match=f"{prefix}:cache:*:vix"))
        assert sum(server.hlen(index) for index in indexes) == len(entries)
        cache.clear()
        _assert_nothing_left_but_the_log(server, prefix)
    finally:
        cache.close()
